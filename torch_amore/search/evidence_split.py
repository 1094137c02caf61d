"""The seeded row draws behind the search's evidence: the held-out rows, the permutations of the target and the
half-samples, each a function of ``seed``, a stream number and an index (NumPy's ``SeedSequence``), so that a test
(or a reader) can replay them. Rows are taken in their global order, so the same seed gives the same rows wherever
the data comes from.

Example:
    >>> import torch
    >>> target = torch.tensor([True, False] * 5)
    >>> held = holdout_mask(target, 0.4, seed=0)
    >>> int(held.sum()), int((held & target).sum())
    (4, 2)
    >>> permutation_order(5, seed=0, k=1).tolist() == permutation_order(5, seed=0, k=1).tolist()
    True
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = [
    "HALF_SAMPLE_STREAM",
    "HOLDOUT_STREAM",
    "PERMUTATION_STREAM",
    "half_sample",
    "holdout_mask",
    "permutation_order",
    "resolve_holdout_rows",
]

#: The stream numbers that keep the three kinds of draw of one seed apart.
HOLDOUT_STREAM, PERMUTATION_STREAM, HALF_SAMPLE_STREAM = 0, 1, 2


def _stratified(target: torch.Tensor, fraction: float, rng: np.random.Generator) -> np.ndarray:
    """Sorted row indices: ``round(fraction * n_c)`` rows drawn from each class ``c``, the target rows first."""
    flags = target.detach().to("cpu").numpy().astype(bool)
    chosen = []
    for rows in (np.flatnonzero(flags), np.flatnonzero(~flags)):
        take = int(round(fraction * len(rows)))
        chosen.append(rng.permutation(rows)[:take])
    return np.sort(np.concatenate(chosen))


def holdout_mask(target: torch.Tensor, fraction: float, seed: int = 0) -> torch.Tensor:
    """The (N,) boolean mask of the held-out rows: ``round(fraction * n)`` of the target rows and of the other rows
    each, drawn with ``numpy.random.default_rng([seed, HOLDOUT_STREAM])``.

    Example:
        >>> holdout_mask(torch.tensor([True, True, False, False]), 0.5).sum().item()
        2
    """
    rows = _stratified(target, fraction, np.random.default_rng([seed, HOLDOUT_STREAM]))
    mask = torch.zeros(target.shape[0], dtype=torch.bool)
    mask[torch.from_numpy(rows)] = True
    return mask.to(target.device)


def permutation_order(n: int, seed: int, k: int) -> np.ndarray:
    """Permutation ``k`` of ``n`` rows: ``numpy.random.default_rng([seed, PERMUTATION_STREAM, k]).permutation(n)``;
    the permuted target is ``target[order]``.

    Example:
        >>> sorted(permutation_order(4, seed=0, k=0).tolist())
        [0, 1, 2, 3]
    """
    return np.random.default_rng([seed, PERMUTATION_STREAM, k]).permutation(n)


def half_sample(target: torch.Tensor, seed: int, b: int) -> np.ndarray:
    """Half-sample ``b``: the sorted indices of half the target rows and half the other rows (rounded), drawn with
    ``numpy.random.default_rng([seed, HALF_SAMPLE_STREAM, b])``.

    Example:
        >>> half_sample(torch.tensor([True, True, False, False]), seed=0, b=0).shape
        (2,)
    """
    return _stratified(target, 0.5, np.random.default_rng([seed, HALF_SAMPLE_STREAM, b]))


def _as_array(holdout_rows: Any) -> np.ndarray:
    """``holdout_rows`` as a one-dimensional numpy array (a ``TypeError``/``ValueError`` naming it otherwise)."""
    if isinstance(holdout_rows, (str, bytes)):
        raise TypeError(
            "Expected `holdout_rows` to be a boolean mask or an array of row indices, but got "
            f"{type(holdout_rows).__name__} {holdout_rows[:40]!r}."
        )
    if hasattr(holdout_rows, "to_numpy"):
        holdout_rows = holdout_rows.to_numpy()
    if isinstance(holdout_rows, torch.Tensor):
        holdout_rows = holdout_rows.detach().to("cpu").numpy()
    try:
        rows = np.asarray(holdout_rows)
    except (TypeError, ValueError) as err:
        raise TypeError(f"Expected `holdout_rows` to be a boolean mask or an array of row indices: {err}") from None
    if rows.ndim != 1:
        raise ValueError(f"Expected `holdout_rows` to be one-dimensional, but got shape {rows.shape}.")
    return rows


def _index_mask(rows: np.ndarray, n: int) -> np.ndarray:
    """The (n,) mask of distinct integer row indices in ``[0, n)``."""
    rows = rows.astype(np.int64)
    if rows.size and (rows.min() < 0 or rows.max() >= n):
        raise ValueError(f"Expected `holdout_rows` indices in [0, {n}), but got {int(rows.min())}..{int(rows.max())}.")
    if np.unique(rows).size != rows.size:
        raise ValueError("Expected distinct row indices in `holdout_rows`, but some repeat.")
    mask = np.zeros(n, dtype=bool)
    mask[rows] = True
    return mask


def resolve_holdout_rows(holdout_rows: Any, n: int) -> torch.Tensor:
    """``holdout_rows`` (a boolean mask of the ``n`` rows, or distinct row indices in ``[0, n)``) as an (n,) boolean
    CPU mask, holding some but not all rows.

    Example:
        >>> resolve_holdout_rows([3, 0], 4).tolist()
        [True, False, False, True]
    """
    rows = _as_array(holdout_rows)
    if rows.dtype == bool:
        if rows.shape[0] != n:
            raise ValueError(
                f"Expected a boolean `holdout_rows` of length {n} (the rows of X), but got {rows.shape[0]}."
            )
        mask = rows.copy()
    elif np.issubdtype(rows.dtype, np.integer) or rows.size == 0:
        mask = _index_mask(rows, n)
    else:
        raise TypeError(f"Expected `holdout_rows` to hold booleans or integer row indices, but got dtype {rows.dtype}.")
    if not mask.any():
        raise ValueError("Expected `holdout_rows` to hold at least one row, but it holds none.")
    if mask.all():
        raise ValueError("Expected `holdout_rows` to leave rows to search, but it holds all the rows of X.")
    return torch.from_numpy(mask)
