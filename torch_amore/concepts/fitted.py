"""Concept bases fitted on the explained activations by scikit-learn (PCA, NMF, ICA), in float64 on the CPU; the
fitted numbers are kept as tensors, so that ``encode`` (``transform``) and ``decode`` (``inverse_transform``) run in
torch on the activations' device.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import torch

from torch_amore.concepts.basis import LearnedBasis, reconstruction_error
from torch_amore.concepts.saving import (
    ModuleFactories,
    check_keys,
    finite_or_none,
    int_field,
    names_field,
    number_field,
    tensor_from_list,
)
from torch_amore.data.arguments import check_int, did_you_mean
from torch_amore.data.fields import FieldError

__all__ = ["FITTED_METHODS", "FittedBasis"]

#: the methods :class:`FittedBasis` fits, each a scikit-learn decomposition
FITTED_METHODS = ("pca", "nmf", "ica")
_TENSORS = ("components", "mean", "mixing")


class FittedBasis(LearnedBasis):
    """K concepts fitted on the layer's activations by PCA, NMF or ICA (scikit-learn, seeded).

    Args:
        method: ``"pca"``, ``"nmf"`` (non-negative activations only, e.g. a ReLU's output) or ``"ica"``.
        n_concepts: K, the number of components; at most D (and at most N for PCA and ICA).
        seed: the ``random_state`` of the decomposition (default 0): a fit repeats exactly.
        names: the K concept names (default ``pca_0``, ``pca_1``, ... after the method).
        options: more keyword arguments of the scikit-learn class (``PCA``, ``NMF``, ``FastICA``), e.g.
            ``{"max_iter": 2000}``, except those set from the other arguments or changing the transform.

    After :meth:`fit`: the float64 tensors ``components`` (K, D), ``mean`` (D,) and, for ICA, ``mixing`` (D, K), and
    the reconstruction error ``fvu`` and ``mse`` on the fitted activations.

    Example:
        >>> import torch
        >>> a = torch.randn(200, 3, generator=torch.Generator().manual_seed(0)) * torch.tensor([3.0, 1.0, 0.1])
        >>> basis = FittedBasis("pca", 2).fit(a)
        >>> basis.names, basis.encode(a).shape
        (['pca_0', 'pca_1'], torch.Size([200, 2]))
        >>> basis.components.abs().argmax(1)   # the two widest units, widest first
        tensor([0, 1])
        >>> round(basis.fvu, 3) < 0.01
        True
    """

    kinds: ClassVar[tuple[str, ...]] = FITTED_METHODS

    def __init__(
        self,
        method: str,
        n_concepts: int,
        *,
        seed: int = 0,
        names: Sequence[str] | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(names)
        if not isinstance(method, str) or method.lower() not in FITTED_METHODS:
            raise ValueError(
                f"Expected `method` to be one of {list(FITTED_METHODS)}, but got {method!r}"
                f"{did_you_mean(str(method).lower(), FITTED_METHODS)}."
            )
        self.kind = method.lower()  # type: ignore[misc]  # one class, three kinds
        self.method = self.kind
        self._k = check_int(n_concepts, "n_concepts", 1)
        self.seed = check_int(seed, "seed", 0)
        self.options = dict(options or {})
        for fixed in ("n_components", "random_state"):
            if fixed in self.options:
                raise ValueError(f"Expected `options` without {fixed!r}: it is set from `n_concepts` and `seed`.")
        changes_transform = {"pca": ("whiten",), "nmf": ("alpha_W",), "ica": ()}[self.kind]
        for name in set(changes_transform) & set(self.options):
            raise ValueError(f"Expected `options` without {name!r}: the basis encodes by the plain transform.")
        self.components: torch.Tensor | None = None
        self.mean: torch.Tensor | None = None
        self.mixing: torch.Tensor | None = None
        self.fvu: float | None = None
        self.mse: float | None = None
        self.check_names()

    def learned(self) -> torch.Tensor | None:
        """The fitted (K, D) components (``None`` before :meth:`fit`)."""
        return self.components

    @property
    def reconstruction_error(self) -> dict[str, float] | None:
        """``{"fvu", "mse"}`` on the fitted activations (``None`` before :meth:`fit`)."""
        return None if self.fvu is None else {"fvu": self.fvu, "mse": float(self.mse or 0.0)}

    def check_width(self, width: int) -> None:
        """A ValueError when ``width`` is not the fitted D, or (before fitting) is smaller than ``n_concepts``."""
        super().check_width(width)
        if not self.fitted and self._k > int(width):
            raise ValueError(
                f"Expected `n_concepts` <= {int(width)} (the layer's units) for {self.kind.upper()}, but got {self._k}."
            )

    # -- fitting and the maps --------------------------------------------------------------------------------------
    def fit(self, activations: torch.Tensor, *, progress: bool = False) -> FittedBasis:
        """Fit the decomposition on ``activations`` (N, D) (float64, on the CPU) and keep its numbers as tensors.

        Raises:
            ValueError: when ``n_concepts`` exceeds D (or N for PCA and ICA), the activations hold NaN or infinity,
                or (NMF) negative values. ``progress`` is ignored.
        """
        a = activations.detach().reshape(activations.shape[0], -1)
        n, d = a.shape
        limit, what = (
            (d, f"the layer's units, D={d}") if self.kind == "nmf" else (min(n, d), f"N={n} rows, D={d} units")
        )
        if self._k > limit:
            raise ValueError(f"Expected `n_concepts` <= {limit} ({what}) for {self.kind.upper()}, but got {self._k}.")
        self._check_values(a)
        x = a.double().cpu().numpy()
        estimator = self._estimator()
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*n_components.*")
            estimator.fit(x)
        self.components = torch.as_tensor(estimator.components_, dtype=torch.float64).clone()
        mean = getattr(estimator, "mean_", None)
        self.mean = torch.zeros(d, dtype=torch.float64) if mean is None else torch.as_tensor(mean).double().clone()
        if self.kind == "ica":
            self.mixing = torch.as_tensor(estimator.mixing_, dtype=torch.float64).clone()
        error = reconstruction_error(self, a)
        self.fvu, self.mse = error["fvu"], error["mse"]
        return self

    def check_sample(self, activations: torch.Tensor) -> None:
        """Before fitting, refuse the first sample's activations (1, D) as :meth:`fit` would: NaN or infinity, or (NMF)
        a negative value.

        Example:
            >>> import torch
            >>> FittedBasis("nmf", 2).check_sample(torch.tensor([[0.5, -2.0, 1.0]]))  # doctest: +ELLIPSIS
            Traceback (most recent call last):
            ...
            ValueError: NMF needs non-negative activations, but the layer's smallest activation is -2: ...
        """
        if not self.fitted:
            self._check_values(activations.detach().reshape(activations.shape[0], -1))

    def _check_values(self, a: torch.Tensor) -> None:
        """The ValueError of activations (N, D) the decomposition cannot fit: NaN or infinity; negative for NMF."""
        if not bool(torch.isfinite(a).all()):
            raise ValueError(
                f"Expected finite activations to fit {self.kind.upper()} on, but they hold NaN or infinity."
            )
        smallest = float(a.min()) if a.numel() else 0.0
        if self.kind == "nmf" and smallest < 0:
            raise ValueError(
                f"NMF needs non-negative activations, but the layer's smallest activation is {smallest:.4g}: "
                "explain a layer whose output is non-negative (e.g. a ReLU's), or use 'pca' or 'ica'."
            )

    def _estimator(self) -> Any:
        """The unfitted scikit-learn decomposition."""
        from sklearn import decomposition

        options = {"n_components": self._k, "random_state": self.seed}
        if self.kind == "pca":
            return decomposition.PCA(**{"svd_solver": "full", **options, **self.options})
        if self.kind == "nmf":
            return decomposition.NMF(**{"init": "nndsvda", "max_iter": 1000, **options, **self.options})
        return decomposition.FastICA(**{"whiten": "unit-variance", "max_iter": 1000, **options, **self.options})

    def _check_fitted(self) -> None:
        if not self.fitted:
            raise ValueError(f"The {self.kind.upper()} concept basis is not fitted yet: call `fit(activations)` first.")

    def encode(self, activations: torch.Tensor) -> torch.Tensor:
        """The K concept activations of ``activations`` (N, D), as scikit-learn's ``transform`` gives them.

        Example:
            >>> import torch
            >>> FittedBasis("ica", 2).encode(torch.ones(1, 2))
            Traceback (most recent call last):
            ...
            ValueError: The ICA concept basis is not fitted yet: call `fit(activations)` first.
        """
        self._check_fitted()
        a = activations.reshape(activations.shape[0], -1)
        self.check_width(a.shape[1])
        components = self.components.to(a.device, a.dtype)
        if self.kind == "nmf":
            return _nonnegative_least_squares(a, components)
        return (a - self.mean.to(a.device, a.dtype)) @ components.T

    def decode(self, concepts: torch.Tensor) -> torch.Tensor:
        """Activations (N, D) from concept activations (N, K), as scikit-learn's ``inverse_transform`` gives them."""
        self._check_fitted()
        mean = self.mean.to(concepts.device, concepts.dtype)
        if self.kind == "ica":
            return concepts @ self.mixing.to(concepts.device, concepts.dtype).T + mean
        return concepts @ self.components.to(concepts.device, concepts.dtype) + mean

    # -- saving ----------------------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The basis's settings, fitted tensors (nested lists; ``None`` before fitting) and reconstruction error.

        Example:
            >>> import json, torch
            >>> from torch_amore.concepts import ConceptBasis
            >>> a = torch.rand(50, 4, generator=torch.Generator().manual_seed(0))
            >>> basis = FittedBasis("nmf", 2).fit(a)
            >>> again = ConceptBasis.from_dict(json.loads(json.dumps(basis.to_dict())))
            >>> again.kind, torch.allclose(again.encode(a), basis.encode(a))
            ('nmf', True)
        """
        options = {str(k): v for k, v in self.options.items()}
        try:
            json.dumps(options, allow_nan=False)
        except (TypeError, ValueError) as err:
            raise ValueError(
                f"The basis's `options` cannot be saved as JSON ({err}): give them as plain numbers and strings."
            ) from err
        out: dict[str, Any] = {
            "kind": self.kind,
            "names": self._saved_names(),
            "n_concepts": self._k,
            "seed": self.seed,
            "options": options,
        }
        for name in _TENSORS:
            value = getattr(self, name)
            out[name] = None if value is None else value.cpu().tolist()
        out.update(fvu=finite_or_none(self.fvu), mse=finite_or_none(self.mse))
        return out

    @classmethod
    def _from_dict(
        cls, data: Mapping[str, Any], modules: ModuleFactories | None, classes: Mapping[str, type[torch.nn.Module]]
    ) -> FittedBasis:
        """The basis :meth:`to_dict` wrote, every field checked (a :class:`FieldError` naming it): the fitted
        tensors finite, ``components`` (K, D) with K = ``n_concepts`` <= D, ``mean`` (D,), ``mixing`` (D, K) for
        ICA only, all or none of them saved."""
        kind = data["kind"]
        keys = ("kind", "names", "n_concepts", "seed", "options", *_TENSORS, "fvu", "mse")
        check_keys(data, keys, f"a saved {kind!r} basis")
        k = int_field(data["n_concepts"], "n_concepts", low=1)
        seed = int_field(data["seed"], "seed", low=0)
        names = names_field(data["names"], "names", k)
        if not isinstance(data["options"], Mapping):
            raise FieldError("options", f"expected a dict, but got {type(data['options']).__name__}.")
        try:
            basis = cls(kind, k, seed=seed, names=names, options=data["options"])
        except (TypeError, ValueError) as err:
            raise FieldError("options", str(err)) from None
        saved = {name for name in _TENSORS if data[name] is not None}
        wanted = {"components", "mean", "mixing"} if kind == "ica" else {"components", "mean"}
        if saved and saved != wanted:  # fitted: all of them; unfitted: none
            name = sorted(saved ^ wanted)[0]
            state = "saved" if name in saved else "missing"
            raise FieldError(name, f"{state}, but a fitted {kind.upper()} basis saves {sorted(wanted)}.")
        if saved:
            components = tensor_from_list(data["components"], "components", shape=[k, None])
            d = components.shape[1]
            if d < k:
                raise FieldError("components", f"expected K={k} rows of D >= K units each, but got shape {[k, d]}.")
            basis.components = _finite(components, "components")
            basis.mean = _finite(tensor_from_list(data["mean"], "mean", shape=[d]), "mean")
            if kind == "ica":
                basis.mixing = _finite(tensor_from_list(data["mixing"], "mixing", shape=[d, k]), "mixing")
        basis.fvu = number_field(data["fvu"], "fvu", low=0.0)
        basis.mse = number_field(data["mse"], "mse", low=0.0)
        return basis


def _finite(tensor: torch.Tensor, name: str) -> torch.Tensor:
    """``tensor``, else a :class:`FieldError` naming ``name`` when it holds NaN or infinity."""
    if not bool(torch.isfinite(tensor).all()):
        raise FieldError(name, "expected finite numbers, but it holds NaN or infinity.")
    return tensor


def _nonnegative_least_squares(a: torch.Tensor, components: torch.Tensor, *, max_sweeps: int = 500) -> torch.Tensor:
    """argmin over ``c >= 0`` of ``||a - c @ components||^2`` for each row of ``a``, by cyclic coordinate descent from
    the clipped least-squares solution."""
    if a.shape[0] == 0:
        return a.new_zeros(0, components.shape[0])
    gram = components @ components.T  # (K, K)
    target = a @ components.T  # (N, K)
    diag = gram.diagonal().clamp_min(torch.finfo(a.dtype).tiny)
    pinv = torch.linalg.pinv(components.double()).to(a.dtype)  # (D, K)
    c = (a @ pinv).clamp_min(0)
    tol = max(1e-7, 10 * torch.finfo(a.dtype).eps)
    for _ in range(max_sweeps):
        moved = a.new_zeros(())
        for k in range(gram.shape[0]):
            new = (c[:, k] - (c @ gram[:, k] - target[:, k]) / diag[k]).clamp_min(0)
            moved = torch.maximum(moved, (new - c[:, k]).abs().max())
            c[:, k] = new
        if float(moved) <= tol * max(float(c.max()), 1e-30):
            break
    return c
