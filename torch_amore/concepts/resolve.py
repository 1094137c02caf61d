"""What ``concepts=`` may be, turned once into a :class:`~torch_amore.concepts.basis.ConceptBasis`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from torch_amore.concepts.basis import ConceptBasis, Directions, EncoderDecoder
from torch_amore.concepts.fitted import FITTED_METHODS, FittedBasis
from torch_amore.concepts.sparse_autoencoder import SparseAutoencoderBasis
from torch_amore.data.arguments import check_int, did_you_mean

__all__ = ["CONCEPT_METHODS", "resolve_concepts"]

#: the bases fitted on the explained activations, by name
CONCEPT_METHODS = (*FITTED_METHODS, "sae")
_ENCODER_KEYS = ("encode", "decode", "n_concepts", "names")
ACCEPTED = (
    "None; a ConceptBasis; a (D, K) tensor or array of directions (or a (D,) one); a tuple (W, center); "
    f"a method name {list(CONCEPT_METHODS)}, or a tuple (method, n_concepts); a dict with 'encode' (and 'decode'); "
    "an nn.Module with `encode` (and `decode`) methods, e.g. a sparse autoencoder; a dict saved by "
    "ConceptBasis.to_dict()"
)


def resolve_concepts(
    concepts: Any,
    *,
    n_concepts: int | None = None,
    seed: int = 0,
    names: Sequence[str] | None = None,
    argument: str = "names",
) -> ConceptBasis | None:
    """The concept basis that ``concepts`` describes (``None`` for none), checked but not fitted yet.

    Args:
        concepts: one of

            * ``None``: no basis (rules over units);
            * a :class:`ConceptBasis`, used as it is;
            * a (D, K) tensor or array ``W``, or a (D,) one (one direction), or a tuple ``(W, center)``:
              :class:`Directions`;
            * ``"pca"``, ``"nmf"``, ``"ica"`` or ``"sae"``, or a tuple such as ``("pca", 8)``: a basis fitted on the
              explained activations (:class:`FittedBasis`, :class:`SparseAutoencoderBasis`) with ``n_concepts``
              concepts (required) and ``seed``;
            * a dict ``{"encode": f, "decode": g}`` (optionally ``"n_concepts"``, ``"names"``): :class:`EncoderDecoder`;
            * an ``nn.Module`` with an ``encode`` method (and ``decode``, for interventions), e.g. a sparse
              autoencoder: :class:`EncoderDecoder` of its methods, saved as the module's import path and state;
            * a dict written by :meth:`ConceptBasis.to_dict` (it has a ``"kind"``).
        n_concepts: K, for a method name.
        seed: the seed of a fitted basis (default 0).
        names: the K concept names (not with a :class:`ConceptBasis` or a saved dict: they hold their own).
        argument: the name of the caller's argument that held ``names``, as error messages name it.

    Raises:
        TypeError: ``concepts`` is none of the above.
        ValueError: an unknown method, a method without ``n_concepts``, bad directions or names.

    Example:
        >>> import torch
        >>> resolve_concepts(torch.eye(3)[:, :2], names=["x", "y"]).names
        ['x', 'y']
        >>> resolve_concepts("pca", n_concepts=4)
        FittedBasis(kind='pca', n_concepts=4, fitted=False)
        >>> resolve_concepts("pcaa", n_concepts=4)
        Traceback (most recent call last):
        ...
        ValueError: Expected a concept method among ['pca', 'nmf', 'ica', 'sae'], but got 'pcaa' (did you mean 'pca'?).
        >>> resolve_concepts(torch.eye(3)[:, :2], names=["x"], argument="concept_names")
        Traceback (most recent call last):
        ...
        ValueError: Expected 2 concept `concept_names`, one per concept, but got 1.
    """
    if concepts is None:
        _no_names(names, "None", argument)
        return None
    if isinstance(concepts, ConceptBasis):
        _no_names(names, "a ConceptBasis", argument)
        return concepts
    if isinstance(concepts, str):
        return _named(_method(concepts, n_concepts, seed), names, argument)
    if isinstance(concepts, tuple) and len(concepts) == 2 and isinstance(concepts[0], str):
        if n_concepts is not None:
            raise ValueError("Expected `n_concepts` once: in the tuple (method, n_concepts) or as the argument.")
        return _named(_method(concepts[0], concepts[1], seed), names, argument)
    if isinstance(concepts, (torch.Tensor, np.ndarray)):
        return _named(Directions(_as_columns(concepts)), names, argument)
    if isinstance(concepts, tuple) and len(concepts) == 2:
        return _named(Directions(_as_columns(concepts[0]), concepts[1]), names, argument)
    if isinstance(concepts, Mapping):
        return _from_mapping(concepts, names, argument)
    if isinstance(concepts, torch.nn.Module) and callable(getattr(concepts, "encode", None)):
        decode = getattr(concepts, "decode", None)
        return _named(EncoderDecoder(concepts.encode, decode if callable(decode) else None), names, argument)
    hint = " (an nn.Module needs an `encode` method)" if isinstance(concepts, torch.nn.Module) else ""
    raise TypeError(f"Expected `concepts` to be one of: {ACCEPTED}; but got {type(concepts).__name__}{hint}.")


def _no_names(names: Sequence[str] | None, what: str, argument: str) -> None:
    if names is not None:
        raise ValueError(f"Expected no `{argument}` with `concepts` given as {what}: give the names to the basis.")


def _named(basis: ConceptBasis, names: Sequence[str] | None, argument: str) -> ConceptBasis:
    """``basis`` with the concept names of ``argument``, checked one per concept where K is known already."""
    if isinstance(names, str):
        raise TypeError(f"Expected `{argument}` to be a sequence of strings, but got a single string.")
    basis.names_argument = argument
    if names is not None:
        basis._names = [str(n) for n in names]
        if basis.fitted or not isinstance(basis, EncoderDecoder):
            basis.check_names()
    return basis


def _method(method: str, n_concepts: Any, seed: int) -> ConceptBasis:
    """The unfitted basis of a method name."""
    key = method.lower()
    if key not in CONCEPT_METHODS:
        raise ValueError(
            f"Expected a concept method among {list(CONCEPT_METHODS)}, but got {method!r}"
            f"{did_you_mean(key, CONCEPT_METHODS)}."
        )
    if n_concepts is None:
        raise ValueError(
            f"Expected `n_concepts` with `concepts={method!r}`: how many concepts to fit "
            "(at most the layer's units for 'pca', 'nmf' and 'ica'; any number for 'sae')."
        )
    n_concepts = check_int(n_concepts, "n_concepts", 1)
    if key == "sae":
        return SparseAutoencoderBasis(n_concepts, seed=seed)
    return FittedBasis(key, n_concepts, seed=seed)


def _as_columns(W: Any) -> Any:
    """A (D,) vector as one (D, 1) column; anything else as it is (Directions checks it)."""
    if isinstance(W, (torch.Tensor, np.ndarray)) and W.ndim == 1:
        return W.reshape(-1, 1)
    return W


def _from_mapping(concepts: Mapping[str, Any], names: Sequence[str] | None, argument: str) -> ConceptBasis:
    """A saved basis (with ``"kind"``) or an encoder/decoder given as a dict."""
    if "kind" in concepts:
        _no_names(names, "a saved basis", argument)
        return ConceptBasis.from_dict(concepts)
    unknown = [k for k in concepts if k not in _ENCODER_KEYS]
    if unknown or "encode" not in concepts:
        first = unknown[0] if unknown else None
        detail = f"an unexpected key {first!r}{did_you_mean(first, _ENCODER_KEYS)}" if unknown else "no 'encode'"
        raise ValueError(f"Expected `concepts` as a dict to have the keys {list(_ENCODER_KEYS)}, but it has {detail}.")
    if names is not None and concepts.get("names") is not None:
        raise ValueError(f"Expected the concept names once: in the dict's 'names' or as `{argument}`.")
    basis = EncoderDecoder(
        concepts["encode"], concepts.get("decode"), n_concepts=concepts.get("n_concepts"), names=concepts.get("names")
    )
    return basis if names is None else _named(basis, names, argument)
