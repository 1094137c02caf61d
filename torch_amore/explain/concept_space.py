"""Rules over concepts: the explainer's concept basis resolved, checked on one sample (of the first batch) before the
full pass, fitted once (in memory on the explained activations, streamed on the first :data:`FIT_ROWS` rows; under
DDP by rank 0, broadcast to every rank), and the one place where a layer's (N, D) activations become the (N, K)
concept activations ``c = encode(a)``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from torch_amore._utils import distributed as D
from torch_amore.concepts.basis import ConceptBasis, EncoderDecoder
from torch_amore.concepts.resolve import resolve_concepts

__all__ = [
    "FIT_ROWS",
    "ConceptModel",
    "check_concepts",
    "check_on_sample",
    "concept_params",
    "concept_selector",
    "differentiable_encode",
    "encode_concepts",
    "fit_once",
    "fit_on_batches",
    "fresh_basis",
    "resolve_basis",
]

#: A fitted basis of a streamed explanation is fitted on this many first rows of the explained data.
FIT_ROWS = 10_000


def resolve_basis(
    concepts: Any, n_concepts: int | None, names: Sequence[str] | None, *, layer: Any, feature_names: Any = None
) -> ConceptBasis | None:
    """The basis of the explainer's (or the callback's) ``concepts=`` (``None``: rules on units), with the checks of
    ``layer``, ``n_concepts`` and ``concept_names`` that need no data.

    Example:
        >>> import torch
        >>> resolve_basis(torch.eye(4)[:, :2], None, ["up", "down"], layer="fc").names
        ['up', 'down']
        >>> resolve_basis(torch.eye(4), None, None, layer=None)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: Expected a `layer` with `concepts=` (concepts are directions of a layer's activations), ...
    """
    if concepts is None:
        if n_concepts is not None:
            raise ValueError("Expected `n_concepts` only with a fitted `concepts` method, but `concepts` is None.")
        if names is not None:
            raise ValueError("Expected `concept_names` only with `concepts=`, but `concepts` is None.")
        return None
    if layer is None:
        raise ValueError(
            "Expected a `layer` with `concepts=` (concepts are directions of a layer's activations), but got "
            "layer=None."
        )
    if isinstance(names, str):
        raise TypeError("Expected `concept_names` to be a sequence of strings, but got a single string.")
    if n_concepts is not None and (isinstance(n_concepts, bool) or not isinstance(n_concepts, int) or n_concepts < 1):
        raise ValueError(f"Expected `n_concepts` to be a positive integer or None, but got {n_concepts!r}.")
    if n_concepts is not None and not isinstance(concepts, str):
        raise ValueError(
            "Expected `n_concepts` only with a fitted method name ('pca', 'nmf', 'ica', 'sae'), but `concepts` is a "
            f"{type(concepts).__name__}, whose K is its own."
        )
    basis = resolve_concepts(
        concepts, n_concepts=n_concepts, names=None if names is None else list(names), argument="concept_names"
    )
    if feature_names is not None:
        raise ValueError("Expected the names of concepts as `concept_names`, not `feature_names`, with `concepts=`.")
    return basis


def _known_k(basis: ConceptBasis) -> int | None:
    try:
        return int(basis.n_concepts)
    except (ValueError, AttributeError, NotImplementedError, TypeError):
        return None


def encode_concepts(basis: ConceptBasis, activations: torch.Tensor) -> torch.Tensor:
    """The (N, K) concept activations of a layer's (N, ...) activations: the one place they are computed.

    Example:
        >>> import torch
        >>> from torch_amore.concepts import Directions
        >>> encode_concepts(Directions(torch.tensor([[1.0], [1.0]])), torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
        tensor([[3.],
                [7.]])
    """
    a = activations.reshape(activations.shape[0], -1)
    c = basis.encode(a)
    k = _known_k(basis)
    if not isinstance(c, torch.Tensor) or c.ndim != 2 or c.shape[0] != a.shape[0] or (k and c.shape[1] != k):
        shape = tuple(c.shape) if isinstance(c, torch.Tensor) else type(c).__name__
        raise ValueError(
            f"Expected the concept basis ({basis.kind}) to encode ({a.shape[0]}, {a.shape[1]}) activations into an "
            f"({a.shape[0]}, K) tensor, but got {shape}."
        )
    return c


def check_on_sample(basis: ConceptBasis, sample: torch.Tensor) -> None:
    """Check ``basis`` on the layer's activations of one sample (1, ...) before the full pass (an encoder without a
    known K is probed here)."""
    a = sample.reshape(sample.shape[0], -1)
    basis.check_width(a.shape[1])
    basis.check_sample(a)
    if isinstance(basis, EncoderDecoder) and not basis.fitted:
        basis.fit(a)
    if basis.fitted:
        encode_concepts(basis, a)
        return
    k = _known_k(basis)
    if k is not None and basis.kind in ("pca", "nmf", "ica") and k > a.shape[1]:
        raise ValueError(
            f"Expected `n_concepts` at most the layer's width ({a.shape[1]}) for {basis.kind!r}, but got {k}."
        )


def check_concepts(explainer: Any, source: Any, request: Any) -> None:
    """Before the full pass: no separate ``features`` matrix, and the basis fits the first sample's activations."""
    from torch_amore.explain.stream_explain import ModelBatches  # it encodes each streamed batch with this module

    if request.matrix is not None:
        raise ValueError(
            "Expected no separate `features` matrix with `concepts=`: the concepts are of the layer's activations."
        )
    check_on_sample(explainer.concepts, ModelBatches(explainer, source, request).first_activations())


def fit_once(basis: ConceptBasis, activations: torch.Tensor, *, progress: bool = False) -> ConceptBasis:
    """``basis`` fitted on ``activations`` (N, ...) unless it is fitted already; under DDP rank 0 fits it on its rows
    and every rank gets rank 0's basis."""
    if basis.fitted:
        return basis
    a = activations.reshape(activations.shape[0], -1)
    fitted = basis.fit(a, progress=progress) if D.rank() == 0 else None
    return D.broadcast_object(fitted)  # rank 0's basis on every rank of a DDP run


def fit_on_batches(
    basis: ConceptBasis, batches: Iterable[torch.Tensor], *, progress: bool = False, rows: int | None = None
) -> ConceptBasis:
    """A streamed explanation's basis: fitted (:func:`fit_once`) on the first ``rows`` (default :data:`FIT_ROWS`)
    of the (B, D) activation ``batches`` (closed after those rows)."""
    if basis.fitted:
        return basis
    rows = FIT_ROWS if rows is None else rows
    parts, have = [], 0
    for a in batches:
        parts.append(a.reshape(a.shape[0], -1)[: rows - have])
        have += parts[-1].shape[0]
        if have >= rows:
            break
    close = getattr(batches, "close", None)
    if callable(close):
        close()
    if not parts:
        raise ValueError("Expected at least one sample to fit the concept basis on, but the data yielded none.")
    return fit_once(basis, torch.cat(parts), progress=progress)


def fresh_basis(basis: ConceptBasis) -> ConceptBasis:
    """An unfitted copy of a basis fitted on data (``"pca"``, ...), for a caller that fits it anew on each extraction;
    any other basis itself."""
    if basis.fitted or isinstance(basis, EncoderDecoder):
        return basis
    return copy.deepcopy(basis)


def concept_params(basis: ConceptBasis) -> dict[str, Any]:
    """What an explanation's parameters say of its basis: its kind, K, the width it reads and, for a fitted basis, its
    reconstruction error (:func:`torch_amore.concepts.reconstruction_error`).

    Example:
        >>> import torch
        >>> from torch_amore.concepts import Directions
        >>> concept_params(Directions(torch.eye(3)[:, :2]))
        {'kind': 'directions', 'n_concepts': 2, 'n_units': 3, 'reconstruction_error': None}
    """
    error = getattr(basis, "reconstruction_error", None)
    if isinstance(error, dict):
        error = {str(k): float(v) for k, v in error.items()}
    elif error is not None and not callable(error):
        error = float(error)
    else:
        error = None
    return {
        "kind": basis.kind,
        "n_concepts": int(basis.n_concepts),
        "n_units": basis.n_units,
        "reconstruction_error": error,
    }


# --- gradients through the basis: pixel maps and feature selection ---------------------------------------------------


def differentiable_encode(basis: ConceptBasis, activations: torch.Tensor) -> torch.Tensor:
    """``encode`` with gradients (an :class:`EncoderDecoder`'s encoder itself); a ValueError when there are none."""
    a = activations.reshape(activations.shape[0], -1)
    c = basis.encode(a)
    if a.requires_grad and not c.requires_grad:
        if isinstance(basis, EncoderDecoder):
            return basis.encoder(a)
        raise ValueError(
            f"Expected a differentiable concept basis for gradients (pixel maps, select_features), but the "
            f"{basis.kind!r} basis's `encode` gives no gradient."
        )
    return c


def _differentiable_decode(basis: ConceptBasis, concepts: torch.Tensor) -> torch.Tensor:
    if isinstance(basis, EncoderDecoder) and basis.decoder is not None:
        return basis.decoder(concepts)
    return basis.decode(concepts)


class ConceptModel(nn.Module):
    """The model with its layer's activations ``a`` routed through ``decode(c) + (a - decode(encode(a)))``, ``c =
    concepts(encode(a))`` (an identity module): the outputs are the model's, and Captum's layer methods on
    :attr:`concepts` attribute to the K concept activations (of the layer's first input with ``layer_input``).

    Example:
        >>> import torch
        >>> from torch import nn
        >>> from torch_amore.concepts import Directions
        >>> model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 1))
        >>> wrapped = ConceptModel(model, model[0], Directions(torch.eye(2)))
        >>> x = torch.rand(3, 2)
        >>> torch.allclose(wrapped(x), model(x))
        True
    """

    def __init__(self, model: nn.Module, layer: nn.Module, basis: ConceptBasis, *, layer_input: bool = False) -> None:
        super().__init__()
        self.model, self.basis, self.layer_input = model, basis, bool(layer_input)
        self._layer = [layer]  # not a submodule of its own: it is one of the model's
        self.concepts = nn.Identity()

    def _route(self, a: torch.Tensor) -> torch.Tensor:
        flat = a.reshape(a.shape[0], -1)
        c = self.concepts(differentiable_encode(self.basis, flat))
        rest = flat - _differentiable_decode(self.basis, differentiable_encode(self.basis, flat))
        return (_differentiable_decode(self.basis, c) + rest).reshape(a.shape).to(a.dtype)

    @contextmanager
    def _hooked(self) -> Any:
        layer = self._layer[0]
        if self.layer_input:
            handle = layer.register_forward_pre_hook(lambda m, args: (self._route(args[0]), *args[1:]))
        else:
            handle = layer.register_forward_hook(
                lambda m, args, out: (self._route(out[0]), *out[1:]) if isinstance(out, tuple) else self._route(out)
            )
        try:
            yield
        finally:
            handle.remove()

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        with self._hooked():
            return self.model(*args, **kwargs)


def concept_selector(basis: ConceptBasis, k: int) -> Callable[[Any], torch.Tensor]:
    """A Captum neuron selector: concept ``k``'s activation of the layer's activations."""

    def select(activation: Any) -> torch.Tensor:
        if isinstance(activation, (tuple, list)):
            activation = activation[0]
        c = differentiable_encode(basis, activation.reshape(activation.shape[0], -1))
        if k >= c.shape[1]:
            raise ValueError(f"Expected concept indices below {c.shape[1]} (the basis's K), but got {k}.")
        return c[:, k]

    return select
