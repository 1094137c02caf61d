"""A concept basis of a layer: K concept activations ``c = encode(a)`` of its flattened activations ``a`` (N, D).

Rules over concepts are rules on ``c`` instead of on the D units. :meth:`ConceptBasis.intervene` changes ``a`` so that
its concepts take other values, keeping what the basis does not reconstruct. The bases given as they are:
:class:`Directions` (a (D, K) matrix and an optional center) and :class:`EncoderDecoder` (any callables or modules);
bases fitted on the explained activations subclass :class:`LearnedBasis`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import torch

from torch_amore.concepts.saving import (
    ModuleClasses,
    ModuleFactories,
    callable_from_json,
    callable_to_json,
    check_keys,
    dtype_from_name,
    dtype_name,
    int_field,
    module_classes,
    module_from_json,
    module_to_json,
    names_field,
    tensor_from_list,
)
from torch_amore.data.arguments import did_you_mean
from torch_amore.data.fields import FieldError

__all__ = ["ConceptBasis", "Directions", "EncoderDecoder", "LearnedBasis", "reconstruction_error"]


def _as_matrix(value: Any, name: str) -> torch.Tensor:
    """``value`` as a floating 2-D tensor (float64 for numpy input), else a TypeError/ValueError naming ``name``."""
    if isinstance(value, torch.Tensor):
        tensor = value.detach()
    else:
        try:
            tensor = torch.as_tensor(np.asarray(value, dtype=np.float64))
        except (TypeError, ValueError) as err:
            raise TypeError(
                f"Expected `{name}` to be a tensor or array of numbers, but got {type(value).__name__}."
            ) from err
    if not tensor.is_floating_point():
        tensor = tensor.double()
    if tensor.ndim != 2:
        raise ValueError(f"Expected `{name}` to be a 2-D (D, K) matrix, but got shape {tuple(tensor.shape)}.")
    if not bool(torch.isfinite(tensor).all()):
        raise ValueError(f"Expected `{name}` to hold finite numbers, but it holds NaN or infinity.")
    return tensor


class ConceptBasis:
    """K concept activations of a layer's flattened activations: ``encode`` (N, D) -> (N, K), ``decode`` back.

    Subclasses set :attr:`kind` and implement :meth:`encode` and :meth:`decode`; fitted bases also :meth:`fit`.

    Args:
        names: the K concept names (default ``concept_0``, ``concept_1``, ...).
    """

    #: What kind of basis this is, as saved in an explanation's JSON (``"directions"``, ``"encoder"``, ``"pca"``, ...).
    kind: ClassVar[str] = "basis"
    # kind -> the class that loads it: every subclass that sets ``kind`` (or ``kinds``, several) in its body
    _registry: ClassVar[dict[str, type[ConceptBasis]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        kinds = cls.__dict__.get("kinds") or ((cls.__dict__["kind"],) if "kind" in cls.__dict__ else ())
        for kind in kinds:
            ConceptBasis._registry[kind] = cls

    #: The argument the concept names came from, as error messages name it.
    names_argument: str = "names"

    def __init__(self, names: Sequence[str] | None = None) -> None:
        if isinstance(names, str):
            raise TypeError("Expected `names` to be a sequence of strings, but got a single string.")
        self._names = None if names is None else [str(n) for n in names]

    # -- what a basis is -------------------------------------------------------------------------------------------
    @property
    def n_concepts(self) -> int:
        """K, the number of concepts (known once the basis is given or fitted)."""
        raise NotImplementedError

    @property
    def n_units(self) -> int | None:
        """D, the width of the activations the basis reads (``None`` while unknown)."""
        return None

    @property
    def fitted(self) -> bool:
        """Whether :meth:`encode` can run (always for given bases)."""
        return True

    @property
    def names(self) -> list[str]:
        """The K concept names: the given ones, else ``concept_{k}``."""
        if self._names is not None:
            return list(self._names)
        return [f"concept_{k}" for k in range(self.n_concepts)]

    def fit(self, activations: torch.Tensor, *, progress: bool = False) -> ConceptBasis:
        """Fit the basis on ``activations`` (N, D) and return it; a given basis only checks the width."""
        self.check_width(activations.shape[1])
        return self

    def encode(self, activations: torch.Tensor) -> torch.Tensor:
        """The concept activations (N, K) of ``activations`` (N, D), on their device and in their dtype."""
        raise NotImplementedError

    def decode(self, concepts: torch.Tensor) -> torch.Tensor:
        """Activations (N, D) whose concepts are ``concepts`` (N, K), as far as the basis reconstructs them."""
        raise NotImplementedError

    def intervene(self, activations: torch.Tensor, concepts: torch.Tensor) -> torch.Tensor:
        """``activations`` changed so that their concepts become ``concepts``, keeping what the basis does not
        reconstruct: ``decode(concepts) + (activations - decode(encode(activations)))``.

        Example:
            >>> import torch
            >>> basis = Directions(torch.eye(3)[:, :2], names=["a", "b"])
            >>> a = torch.tensor([[1.0, 2.0, 3.0]])
            >>> basis.intervene(a, torch.tensor([[5.0, 2.0]]))
            tensor([[5., 2., 3.]])
        """
        return self.decode(concepts) + (activations - self.decode(self.encode(activations)))

    def check_width(self, width: int) -> None:
        """A ValueError when the layer's flattened width ``width`` is not the D the basis reads."""
        if self.n_units is not None and int(width) != self.n_units:
            raise ValueError(
                f"Expected the layer's activations to have {self.n_units} units, as the concept basis "
                f"({self.kind}) reads, but the layer has {int(width)}."
            )

    def check_sample(self, activations: torch.Tensor) -> None:
        """A ValueError when the basis refuses the first sample's flattened activations (1, D), before the full pass
        (e.g. NMF refuses negative values); the base class accepts any."""

    def check_names(self) -> None:
        """A ValueError when the given names are not one per concept (naming :attr:`names_argument`)."""
        if self._names is not None and len(self._names) != self.n_concepts:
            raise ValueError(
                f"Expected {self.n_concepts} concept `{self.names_argument}`, one per concept, but got "
                f"{len(self._names)}."
            )

    def __repr__(self) -> str:
        try:
            k: Any = self.n_concepts
        except ValueError:  # an encoder not probed yet
            k = "?"
        unfitted = "" if self.fitted else ", fitted=False"
        return f"{type(self).__name__}(kind={self.kind!r}, n_concepts={k}{unfitted})"

    # -- saving ----------------------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The basis as JSON-safe numbers and strings, for :meth:`from_dict`; a ValueError when it cannot be saved."""
        raise ValueError(f"A {type(self).__name__} cannot be saved: it defines no `to_dict()`.")

    @classmethod
    def from_dict(
        cls,
        data: Mapping[str, Any],
        *,
        modules: ModuleFactories | None = None,
        classes: ModuleClasses | None = None,
    ) -> ConceptBasis:
        """The basis that :meth:`to_dict` wrote, of the class registered for its ``kind``; a malformed field raises
        :class:`~torch_amore.concepts.saving.FieldError` (a ``ValueError``) naming it, before anything is built.

        Loading imports nothing a file names: a saved ``nn.Module`` (an :class:`EncoderDecoder`'s) is built from one
        of torch.nn's own module classes or from ``classes``; any other class is refused.

        Args:
            data: the dict from :meth:`to_dict` (e.g. read back from JSON).
            modules: for an ``nn.Module`` that cannot be built without arguments: its class's import path, or its
                index in the saved ``"modules"``, -> an instance or a callable that builds one (the saved
                ``state_dict`` is loaded into it).
            classes: your ``nn.Module`` classes the file may name (e.g. ``classes=[MySAE]``), each built with no
                arguments; found by the saved import path, else by the class's name.

        Example:
            >>> import json, torch
            >>> basis = Directions(torch.tensor([[1.0], [1.0]]), names=["sum"])
            >>> again = ConceptBasis.from_dict(json.loads(json.dumps(basis.to_dict())))
            >>> again.names, again.encode(torch.tensor([[2.0, 3.0]]))
            (['sum'], tensor([[5.]]))
        """
        allowed = module_classes(classes)  # the caller's mistakes first: a TypeError, not a field of the file
        if not isinstance(data, Mapping):
            raise FieldError("", f"expected a concept basis saved as a dict, but got {type(data).__name__}.")
        kind = data.get("kind")
        if not isinstance(kind, str) or kind not in ConceptBasis._registry:
            raise FieldError(  # the whole dict: a basis of a kind this library does not know
                "",
                f"expected a concept basis `kind` among {sorted(ConceptBasis._registry)}, but got {kind!r:.80}"
                f"{did_you_mean(kind, ConceptBasis._registry) if isinstance(kind, str) else ''}.",
            )
        found = ConceptBasis._registry[kind]
        if not issubclass(found, cls):
            raise FieldError("", f"expected a saved {cls.__name__}, but the dict holds a {found.__name__}.")
        return found._from_dict(data, modules, allowed)

    @classmethod
    def _from_dict(
        cls, data: Mapping[str, Any], modules: ModuleFactories | None, classes: Mapping[str, type[torch.nn.Module]]
    ) -> ConceptBasis:
        """The subclass's loader (``data["kind"]`` already checked; ``classes`` by their import path)."""
        raise ValueError(f"A saved {cls.__name__} cannot be loaded: it defines no `_from_dict`.")

    def _saved_names(self) -> list[str] | None:
        return None if self._names is None else list(self._names)


class Directions(ConceptBasis):
    """Concepts along directions: ``c = (a - center) @ W`` with ``W`` (D, K); decoded through ``pinv(W)``.

    Args:
        W: the (D, K) directions, one per column (tensor or array).
        center: an optional (D,) point subtracted first (default zero).
        names: the K concept names.

    Example:
        >>> import torch
        >>> W = torch.tensor([[1.0], [1.0]]) / 2**0.5   # the diagonal of a 2-unit layer
        >>> basis = Directions(W, names=["diagonal"])
        >>> basis.encode(torch.tensor([[1.0, 1.0], [1.0, -1.0]])).squeeze(1)
        tensor([1.4142, 0.0000])
        >>> basis.names
        ['diagonal']
    """

    kind = "directions"

    def __init__(self, W: Any, center: Any = None, *, names: Sequence[str] | None = None) -> None:
        super().__init__(names)
        self.W = _as_matrix(W, "W")
        if center is None:
            self.center = None
        else:
            c = _as_matrix(center.reshape(1, -1) if hasattr(center, "reshape") else [list(center)], "center")
            if c.shape[1] != self.W.shape[0]:
                raise ValueError(
                    f"Expected `center` to have {self.W.shape[0]} entries (the rows of `W`), but got {c.shape[1]}."
                )
            self.center = c.reshape(-1)
        self._pinv = torch.linalg.pinv(self.W.double()).to(self.W.dtype)  # (K, D)
        self.check_names()

    @property
    def n_concepts(self) -> int:
        return int(self.W.shape[1])

    @property
    def n_units(self) -> int:
        return int(self.W.shape[0])

    def encode(self, activations: torch.Tensor) -> torch.Tensor:
        a = activations.reshape(activations.shape[0], -1)
        self.check_width(a.shape[1])
        W = self.W.to(a.device, a.dtype)
        if self.center is not None:
            a = a - self.center.to(a.device, a.dtype)
        return a @ W

    def decode(self, concepts: torch.Tensor) -> torch.Tensor:
        a = concepts @ self._pinv.to(concepts.device, concepts.dtype)
        return a if self.center is None else a + self.center.to(concepts.device, concepts.dtype)

    def intervene(self, activations: torch.Tensor, concepts: torch.Tensor) -> torch.Tensor:
        # decode(c') + a - decode(encode(a)) = a + (c' - c) @ pinv(W): the center cancels
        shift = (concepts - self.encode(activations)) @ self._pinv.to(concepts.device, concepts.dtype)
        return activations.reshape(activations.shape[0], -1) + shift

    def to_dict(self) -> dict[str, Any]:
        """``{"kind": "directions", "names", "dtype", "W", "center"}``, tensors as nested lists of numbers."""
        center = None if self.center is None else self.center.cpu().tolist()
        return {
            "kind": self.kind,
            "names": self._saved_names(),
            "dtype": dtype_name(self.W.dtype),
            "W": self.W.cpu().tolist(),
            "center": center,
        }

    @classmethod
    def _from_dict(
        cls, data: Mapping[str, Any], modules: ModuleFactories | None, classes: Mapping[str, type[torch.nn.Module]]
    ) -> Directions:
        check_keys(data, ("kind", "names", "dtype", "W", "center"), "a saved 'directions' basis")
        dtype = dtype_from_name(data["dtype"])
        if not dtype.is_floating_point:
            raise FieldError("dtype", f"expected a floating dtype, but got {data['dtype']!r}.")
        W = tensor_from_list(data["W"], "W", dtype, shape=[None, None])
        if W.numel() == 0 or not bool(torch.isfinite(W).all()):
            raise FieldError("W", f"expected a (D, K) matrix of finite numbers, but got shape {list(W.shape)}.")
        center = data["center"]
        if center is not None:
            center = tensor_from_list(center, "center", dtype, shape=[W.shape[0]])
        if center is not None and not bool(torch.isfinite(center).all()):
            raise FieldError("center", "expected finite numbers, but it holds NaN or infinity.")
        return cls(W, center, names=names_field(data["names"], "names", W.shape[1]))


class LearnedBasis(ConceptBasis):
    """A basis of ``_k`` concepts learned by :meth:`fit` (PCA, NMF, ICA, a sparse autoencoder): fitted once its
    (K, D) weights exist (:meth:`learned`), named ``{kind}_{k}`` by default.
    """

    _k: int

    def learned(self) -> torch.Tensor | None:
        """The learned (K, D) weights (components, decoder rows), ``None`` before :meth:`fit`."""
        raise NotImplementedError

    @property
    def n_concepts(self) -> int:
        return self._k

    @property
    def n_units(self) -> int | None:
        weights = self.learned()
        return None if weights is None else int(weights.shape[1])

    @property
    def fitted(self) -> bool:
        return self.learned() is not None

    @property
    def names(self) -> list[str]:
        """The K concept names: the given ones, else ``{kind}_{k}`` (``pca_0``, ``sae_0``, ...)."""
        return list(self._names) if self._names is not None else [f"{self.kind}_{k}" for k in range(self._k)]


class EncoderDecoder(ConceptBasis):
    """Concepts given by an encoder ``c = encode(a)`` and, for interventions, a decoder ``a = decode(c)``.

    Args:
        encode: a callable or ``nn.Module`` from (N, D) activations to (N, K) concept activations (e.g. a sparse
            autoencoder's encoder).
        decode: its inverse as far as it goes, (N, K) -> (N, D); needed by ``verify`` in concept space only.
        n_concepts: K; by default measured by encoding one row on first use (:meth:`fit`).
        names: the K concept names.

    Example:
        >>> import torch
        >>> basis = EncoderDecoder(lambda a: a[:, :1] + a[:, 1:], lambda c: torch.cat([c / 2, c / 2], 1))
        >>> basis.fit(torch.ones(4, 2)).n_concepts
        1
        >>> basis.encode(torch.tensor([[1.0, 2.0]]))
        tensor([[3.]])
    """

    kind = "encoder"

    def __init__(
        self,
        encode: Callable[[torch.Tensor], torch.Tensor],
        decode: Callable[[torch.Tensor], torch.Tensor] | None = None,
        *,
        n_concepts: int | None = None,
        names: Sequence[str] | None = None,
    ) -> None:
        super().__init__(names)
        if not callable(encode):
            raise TypeError(f"Expected `encode` to be a callable or nn.Module, but got {type(encode).__name__}.")
        if decode is not None and not callable(decode):
            raise TypeError(f"Expected `decode` to be a callable, nn.Module or None, but got {type(decode).__name__}.")
        if n_concepts is not None and (
            isinstance(n_concepts, bool) or not isinstance(n_concepts, int) or n_concepts < 1
        ):
            raise ValueError(f"Expected `n_concepts` to be a positive integer or None, but got {n_concepts!r}.")
        self.encoder, self.decoder = encode, decode
        self._k = n_concepts
        self._d: int | None = None

    @property
    def n_concepts(self) -> int:
        if self._k is None:
            raise ValueError("The encoder's number of concepts is not known yet: call `fit(activations)` first.")
        return self._k

    @property
    def n_units(self) -> int | None:
        return self._d

    @property
    def fitted(self) -> bool:
        return self._k is not None

    def fit(self, activations: torch.Tensor, *, progress: bool = False) -> EncoderDecoder:
        """Probe the encoder on one row: its output must be (1, K); remembers D and K."""
        a = activations.reshape(activations.shape[0], -1)
        self.check_width(a.shape[1])
        with torch.no_grad():
            out = self.encoder(a[:1])
        if not isinstance(out, torch.Tensor) or out.ndim != 2 or out.shape[0] != 1:
            shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise ValueError(
                f"Expected `encode` to map (N, {a.shape[1]}) activations to an (N, K) tensor, but one row gave {shape}."
            )
        if self._k is not None and out.shape[1] != self._k:
            raise ValueError(f"Expected `encode` to give `n_concepts`={self._k} columns, but it gave {out.shape[1]}.")
        self._k, self._d = int(out.shape[1]), int(a.shape[1])
        self.check_names()
        return self

    def encode(self, activations: torch.Tensor) -> torch.Tensor:
        a = activations.reshape(activations.shape[0], -1)
        if not self.fitted:
            self.fit(a)
        self.check_width(a.shape[1])
        with torch.no_grad():
            out = self.encoder(a)
        if not isinstance(out, torch.Tensor) or out.shape != (a.shape[0], self.n_concepts):
            shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise ValueError(f"Expected `encode` to give an ({a.shape[0]}, {self.n_concepts}) tensor, but got {shape}.")
        return out

    def decode(self, concepts: torch.Tensor) -> torch.Tensor:
        if self.decoder is None:
            raise ValueError("Expected a `decode` callable for interventions in concept space, but the basis has none.")
        with torch.no_grad():
            return self.decoder(concepts)

    def to_dict(self) -> dict[str, Any]:
        """``{"kind": "encoder", "names", "n_concepts", "n_units", "modules", "encode", "decode"}``: each distinct
        ``nn.Module`` once in ``modules`` (import path and ``state_dict``), ``encode``/``decode`` as
        ``{"module": index, "method": name}``. A plain function or lambda cannot be saved.

        Example:
            >>> import torch
            >>> EncoderDecoder(lambda a: a).to_dict()  # doctest: +ELLIPSIS
            Traceback (most recent call last):
            ...
            ValueError: The concept basis's `encode` (a function, <lambda>) cannot be saved: only an nn.Module or ...
        """
        modules: list[torch.nn.Module] = []
        encode = callable_to_json(self.encoder, "encode", modules)
        decode = None if self.decoder is None else callable_to_json(self.decoder, "decode", modules)
        return {
            "kind": self.kind,
            "names": self._saved_names(),
            "n_concepts": self._k,
            "n_units": self._d,
            "modules": [module_to_json(m, f"modules[{i}]") for i, m in enumerate(modules)],
            "encode": encode,
            "decode": decode,
        }

    @classmethod
    def _from_dict(
        cls, data: Mapping[str, Any], modules: ModuleFactories | None, classes: Mapping[str, type[torch.nn.Module]]
    ) -> EncoderDecoder:
        keys = ("kind", "names", "n_concepts", "n_units", "modules", "encode", "decode")
        check_keys(data, keys, "a saved 'encoder' basis")
        k = int_field(data["n_concepts"], "n_concepts", low=1, optional=True)
        d = int_field(data["n_units"], "n_units", low=1, optional=True)
        names = names_field(data["names"], "names", k)
        if not isinstance(data["modules"], list):
            got = type(data["modules"]).__name__
            raise FieldError("modules", f"expected a list of saved modules, but got {got}.")
        built = [module_from_json(m, f"modules[{i}]", modules, i, classes) for i, m in enumerate(data["modules"])]
        encode = callable_from_json(data["encode"], "encode", built)
        decode = None if data["decode"] is None else callable_from_json(data["decode"], "decode", built)
        basis = cls(encode, decode, n_concepts=k, names=names)
        basis._d = d
        return basis


def reconstruction_error(basis: ConceptBasis, activations: torch.Tensor, *, batch_size: int = 4096) -> dict[str, float]:
    """How much of ``activations`` (N, D) the basis reconstructs, ``a_hat = decode(encode(a))``, in batches:
    ``{"fvu": sum ||a - a_hat||^2 / sum ||a - mean(a)||^2, "mse": mean (a - a_hat)^2}`` (FVU, the fraction of
    variance unexplained: 0 is perfect, 1 is no better than the mean).

    Example:
        >>> import torch
        >>> a = torch.tensor([[1.0, 0.0], [3.0, 0.0], [2.0, 1.0]])
        >>> error = reconstruction_error(Directions(torch.tensor([[1.0], [0.0]])), a)  # the first unit only
        >>> round(error["fvu"], 4), round(error["mse"], 4)  # 1 of 8/3 around the mean; 1 of 6 numbers
        (0.375, 0.1667)
    """
    a = activations.reshape(activations.shape[0], -1)
    mean = a.double().mean(0)
    residual = total = 0.0
    with torch.no_grad():
        for rows in a.split(batch_size):
            error = rows.double() - basis.decode(basis.encode(rows)).double()
            residual += float((error**2).sum())
            total += float(((rows.double() - mean) ** 2).sum())
    fvu = residual / total if total > 0 else (0.0 if residual == 0 else float("inf"))
    return {"fvu": fvu, "mse": residual / max(a.numel(), 1)}
