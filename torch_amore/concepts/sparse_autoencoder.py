"""A small top-k sparse autoencoder trained on the explained activations (as in Gao et al. 2024, "Scaling and
evaluating sparse autoencoders"): its K features are the concepts. After fitting, the weights are folded back into
the activations' units: ``c = topk(relu((a - center) @ W_enc + b_enc))``, ``decode(c) = c @ W_dec + b_dec``, so a
concept activation is the length of ``a`` along the unit direction ``W_dec[k]``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from torch_amore._utils.progress import progress_bar
from torch_amore.concepts.basis import LearnedBasis, reconstruction_error
from torch_amore.concepts.saving import (
    ModuleFactories,
    check_keys,
    dtype_from_name,
    dtype_name,
    finite_or_none,
    int_field,
    names_field,
    number_field,
    tensor_from_list,
)
from torch_amore.data.arguments import check_int
from torch_amore.data.fields import FieldError

__all__ = ["SparseAutoencoderBasis"]

_WEIGHTS = ("center", "W_enc", "b_enc", "W_dec", "b_dec")
_SETTINGS = ("top_k", "steps", "batch_size", "lr", "dead_after", "seed")


class SparseAutoencoderBasis(LearnedBasis):
    """K concepts learned by a top-k sparse autoencoder on the layer's activations.

    Args:
        n_concepts: K, the number of features (may exceed D: an overcomplete dictionary).
        top_k: how many features each row keeps (default ``max(1, n_concepts // 8)``, at most K).
        steps: Adam steps (default 2000), each on ``batch_size`` rows drawn without replacement, epoch by epoch.
        batch_size: rows per step (default 256; all rows when there are fewer).
        lr: Adam's learning rate (default 1e-3).
        dead_after: steps without firing after which a feature restarts (default 200; 0: never).
        seed: the seed of the initialisation and of the batches (default 0).
        names: the K concept names (default ``sae_0``, ``sae_1``, ...).

    After :meth:`fit`: the tensors ``center``, ``W_enc`` (D, K), ``b_enc``, ``W_dec`` (K, D) with unit rows and
    ``b_dec``, and :attr:`reconstruction_error` on the fitted rows (``dead_fraction``: features active on no row).

    Example:
        >>> import torch
        >>> g = torch.Generator().manual_seed(0)
        >>> a = torch.randn(512, 8, generator=g)
        >>> sae = SparseAutoencoderBasis(16, top_k=4, steps=200).fit(a)
        >>> sae.encode(a).shape, int((sae.encode(a) > 0).sum(1).max())
        (torch.Size([512, 16]), 4)
        >>> sae.names[:2], 0 <= sae.fvu < 1
        (['sae_0', 'sae_1'], True)
    """

    kind = "sae"

    def __init__(
        self,
        n_concepts: int,
        *,
        top_k: int | None = None,
        steps: int = 2000,
        batch_size: int = 256,
        lr: float = 1e-3,
        dead_after: int = 200,
        seed: int = 0,
        names: Sequence[str] | None = None,
    ) -> None:
        super().__init__(names)
        self._k = check_int(n_concepts, "n_concepts", 1)
        self.top_k = max(1, self._k // 8) if top_k is None else check_int(top_k, "top_k", 1)
        if self.top_k > self._k:
            raise ValueError(f"Expected `top_k` <= `n_concepts` ({self._k}), but got {self.top_k}.")
        self.steps = check_int(steps, "steps", 1)
        self.batch_size = check_int(batch_size, "batch_size", 1)
        if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not 0 < lr < math.inf:
            raise ValueError(f"Expected `lr` to be a positive number, but got {lr!r}.")
        self.lr = float(lr)
        self.dead_after = check_int(dead_after, "dead_after", 0)
        self.seed = check_int(seed, "seed", 0)
        self.center: torch.Tensor | None = None
        self.W_enc: torch.Tensor | None = None
        self.b_enc: torch.Tensor | None = None
        self.W_dec: torch.Tensor | None = None
        self.b_dec: torch.Tensor | None = None
        self.fvu: float | None = None
        self.mse: float | None = None
        self.dead_fraction: float | None = None
        self.check_names()

    def learned(self) -> torch.Tensor | None:
        """The decoder's (K, D) rows (``None`` before :meth:`fit`)."""
        return self.W_dec

    @property
    def reconstruction_error(self) -> dict[str, float] | None:
        """``{"fvu", "mse", "dead_fraction"}`` on the fitted activations (``None`` before :meth:`fit`)."""
        if self.fvu is None:
            return None
        return {"fvu": self.fvu, "mse": float(self.mse or 0.0), "dead_fraction": float(self.dead_fraction or 0.0)}

    # -- training --------------------------------------------------------------------------------------------------
    def fit(self, activations: torch.Tensor, *, progress: bool = False) -> SparseAutoencoderBasis:
        """Train the autoencoder on ``activations`` (N, D), centred and scaled to unit mean squared norm per unit, on
        their device (seeded: it repeats exactly on the CPU), and keep its weights.

        Args:
            activations: the layer's activations, (N, D) or (N, ...) (flattened per row).
            progress: show a progress bar of the steps (with the batch's FVU).
        """
        a = activations.detach().reshape(activations.shape[0], -1)
        if a.shape[0] == 0:
            raise ValueError("Expected at least one row of activations to train the sparse autoencoder on.")
        if not bool(torch.isfinite(a).all()):
            raise ValueError("Expected finite activations to train the sparse autoencoder on, but got NaN or infinity.")
        dtype = torch.float64 if a.dtype == torch.float64 else torch.float32
        a = a.to(dtype)
        center = a.mean(0)
        scale = float(((a - center) ** 2).sum(1).mean().sqrt()) / math.sqrt(a.shape[1]) or 1.0
        x = (a - center) / scale
        W_enc, b_enc, W_dec, b_dec = _train(x, self, progress)
        self.center = center
        self.W_enc, self.b_enc = W_enc, b_enc * scale  # the encoder reads unscaled rows; features in their units
        self.W_dec, self.b_dec = W_dec, b_dec * scale + center
        error = reconstruction_error(self, a)
        self.fvu, self.mse = error["fvu"], error["mse"]
        fired = torch.zeros(self._k, dtype=torch.bool, device=a.device)
        with torch.no_grad():
            for rows in a.split(4096):
                fired |= (self.encode(rows) > 0).any(0)
        self.dead_fraction = 1.0 - float(fired.double().mean())
        return self

    # -- the maps --------------------------------------------------------------------------------------------------
    def _check_fitted(self) -> None:
        if not self.fitted:
            raise ValueError("The sparse autoencoder is not trained yet: call `fit(activations)` first.")

    def encode(self, activations: torch.Tensor) -> torch.Tensor:
        """The K feature activations: ``topk(relu((a - center) @ W_enc + b_enc))``, other features 0.

        Example:
            >>> import torch
            >>> SparseAutoencoderBasis(4).encode(torch.ones(1, 2))
            Traceback (most recent call last):
            ...
            ValueError: The sparse autoencoder is not trained yet: call `fit(activations)` first.
        """
        self._check_fitted()
        a = activations.reshape(activations.shape[0], -1)
        self.check_width(a.shape[1])
        device, dtype = a.device, a.dtype
        pre = (a - self.center.to(device, dtype)) @ self.W_enc.to(device, dtype) + self.b_enc.to(device, dtype)
        return _keep_top(pre.relu(), self.top_k)

    def decode(self, concepts: torch.Tensor) -> torch.Tensor:
        """Activations from feature activations: ``c @ W_dec + b_dec``."""
        self._check_fitted()
        device, dtype = concepts.device, concepts.dtype
        return concepts @ self.W_dec.to(device, dtype) + self.b_dec.to(device, dtype)

    # -- saving ----------------------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The basis's settings, weights (nested lists; ``None`` before fitting) and reconstruction error.

        Example:
            >>> import json, torch
            >>> from torch_amore.concepts import ConceptBasis
            >>> a = torch.randn(64, 4, generator=torch.Generator().manual_seed(0))
            >>> sae = SparseAutoencoderBasis(8, steps=20).fit(a)
            >>> again = ConceptBasis.from_dict(json.loads(json.dumps(sae.to_dict())))
            >>> torch.allclose(again.encode(a), sae.encode(a)), again.fvu == sae.fvu
            (True, True)
        """
        out: dict[str, Any] = {"kind": self.kind, "names": self._saved_names(), "n_concepts": self._k}
        out.update({name: getattr(self, name) for name in _SETTINGS})
        out["dtype"] = None if self.W_dec is None else dtype_name(self.W_dec.dtype)
        for name in _WEIGHTS:
            value = getattr(self, name)
            out[name] = None if value is None else value.cpu().tolist()
        out.update(fvu=finite_or_none(self.fvu), mse=finite_or_none(self.mse), dead_fraction=self.dead_fraction)
        return out

    @classmethod
    def _from_dict(
        cls, data: Mapping[str, Any], modules: ModuleFactories | None, classes: Mapping[str, type[torch.nn.Module]]
    ) -> SparseAutoencoderBasis:
        """The basis :meth:`to_dict` wrote, every field checked (a :class:`FieldError` naming it): the weights
        finite and of the shapes of K = ``n_concepts`` features over D units, all or none of them saved."""
        keys = ("kind", "names", "n_concepts", *_SETTINGS, "dtype", *_WEIGHTS, "fvu", "mse", "dead_fraction")
        check_keys(data, keys, "a saved 'sae' basis")
        k = int_field(data["n_concepts"], "n_concepts", low=1)
        names = names_field(data["names"], "names", k)
        try:
            basis = cls(k, names=names, **{name: data[name] for name in _SETTINGS})
        except (TypeError, ValueError) as err:
            raise FieldError("", str(err)) from None
        saved = [name for name in ("dtype", *_WEIGHTS) if data[name] is not None]
        if saved and len(saved) != 1 + len(_WEIGHTS):  # fitted: the dtype and every weight; unfitted: none
            missing = next(name for name in ("dtype", *_WEIGHTS) if data[name] is None)
            raise FieldError(missing, "missing, but a trained sparse autoencoder saves its dtype and every weight.")
        if saved:
            dtype = dtype_from_name(data["dtype"])
            if not dtype.is_floating_point:
                raise FieldError("dtype", f"expected a floating dtype, but got {data['dtype']!r}.")
            center = tensor_from_list(data["center"], "center", dtype, shape=[None])
            d = center.shape[0]
            shapes = {"center": [d], "W_enc": [d, k], "b_enc": [k], "W_dec": [k, d], "b_dec": [d]}
            for name in _WEIGHTS:
                weight = center if name == "center" else tensor_from_list(data[name], name, dtype, shape=shapes[name])
                if not bool(torch.isfinite(weight).all()):
                    raise FieldError(name, "expected finite numbers, but it holds NaN or infinity.")
                setattr(basis, name, weight)
        for name in ("fvu", "mse", "dead_fraction"):
            setattr(basis, name, number_field(data[name], name, low=0.0))
        return basis


def _keep_top(values: torch.Tensor, k: int) -> torch.Tensor:
    """``values`` with all but the ``k`` largest entries of each row set to 0."""
    if k >= values.shape[1]:
        return values
    top = values.topk(k, dim=1)
    return torch.zeros_like(values).scatter(1, top.indices, top.values)


def _train(
    x: torch.Tensor, settings: SparseAutoencoderBasis, progress: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Train on the centred, scaled rows ``x`` (N, D): Adam on the squared error, the decoder's rows renormalised
    after every step, dead features restarted; returns ``W_enc`` (D, K), ``b_enc``, ``W_dec`` (K, D), ``b_dec``."""
    n, d = x.shape
    k, top_k, device = settings.n_concepts, settings.top_k, x.device
    g = torch.Generator().manual_seed(settings.seed)  # on the CPU: the same draws on every device
    W_dec = torch.randn(k, d, generator=g, dtype=torch.float64).to(device, x.dtype)
    W_dec = W_dec / W_dec.norm(dim=1, keepdim=True)
    W_enc = W_dec.T.clone().requires_grad_()
    W_dec.requires_grad_()
    b_enc = torch.zeros(k, device=device, dtype=x.dtype, requires_grad=True)
    b_dec = torch.zeros(d, device=device, dtype=x.dtype, requires_grad=True)
    optimizer = torch.optim.Adam([W_enc, b_enc, W_dec, b_dec], lr=settings.lr)
    batch = min(settings.batch_size, n)
    idle = torch.zeros(k, dtype=torch.long, device=device)  # steps since each feature last fired
    order, at = torch.randperm(n, generator=g).to(device), 0
    bar = progress_bar(progress, total=settings.steps, desc="sparse autoencoder")
    for step in range(settings.steps):
        if at + batch > n:
            order, at = torch.randperm(n, generator=g).to(device), 0
        rows = x[order[at : at + batch]]
        at += batch
        c = _keep_top((rows @ W_enc + b_enc).relu(), top_k)
        error = c @ W_dec + b_dec - rows
        loss = (error**2).sum(1).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            W_dec /= W_dec.norm(dim=1, keepdim=True).clamp_min(1e-12)
            idle = torch.where((c > 0).any(0), 0, idle + 1)
            if settings.dead_after and (step + 1) % settings.dead_after == 0 and step + 1 < settings.steps:
                _restart(idle >= settings.dead_after, rows, error, W_enc, b_enc, W_dec, optimizer)
        bar.update(1)
        if progress and step % 50 == 0:
            bar.set_postfix_str(f"FVU {float(loss.detach()) / float((rows**2).sum(1).mean()):.3f}")
    bar.close()
    return tuple(w.detach().contiguous() for w in (W_enc, b_enc, W_dec, b_dec))  # type: ignore[return-value]


def _restart(
    dead: torch.Tensor,
    rows: torch.Tensor,
    error: torch.Tensor,
    W_enc: torch.Tensor,
    b_enc: torch.Tensor,
    W_dec: torch.Tensor,
    optimizer: torch.optim.Optimizer,
) -> None:
    """Point the ``dead`` features at the residuals of the batch's worst-reconstructed rows (largest first), with
    their Adam moments reset."""
    n_dead = int(dead.sum())
    if n_dead == 0:
        return
    worst = (error**2).sum(1).topk(min(n_dead, len(rows))).indices
    dead_index = dead.nonzero().squeeze(1)[: len(worst)]
    residual = -error[worst]
    direction = residual / residual.norm(dim=1, keepdim=True).clamp_min(1e-12)
    W_dec[dead_index] = direction
    W_enc[:, dead_index] = direction.T * 0.2
    b_enc[dead_index] = 0
    for param, index, dim in ((W_dec, dead_index, 0), (W_enc, dead_index, 1), (b_enc, dead_index, 0)):
        state = optimizer.state.get(param, {})
        for moment in ("exp_avg", "exp_avg_sq"):
            if moment in state:
                state[moment].index_fill_(dim, index, 0)
