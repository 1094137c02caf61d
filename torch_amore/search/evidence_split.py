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

import numpy as np
import torch

__all__ = [
    "HALF_SAMPLE_STREAM",
    "HOLDOUT_STREAM",
    "PERMUTATION_STREAM",
    "half_sample",
    "holdout_mask",
    "permutation_order",
]

#: The stream numbers that keep the three kinds of draw of one seed apart.
HOLDOUT_STREAM, PERMUTATION_STREAM, HALF_SAMPLE_STREAM = 0, 1, 2


def _stratified(
    target: torch.Tensor, fraction: float, rng: np.random.Generator, *, every_class: bool = False
) -> np.ndarray:
    """Sorted row indices: ``round(fraction * n_c)`` rows drawn from each class ``c`` (Python's ``round``, half to
    even), the target rows first; ``every_class``: at least one row of each class that has rows."""
    flags = target.detach().to("cpu").numpy().astype(bool)
    chosen = []
    for rows in (np.flatnonzero(flags), np.flatnonzero(~flags)):
        take = int(round(fraction * len(rows)))
        if every_class and len(rows):
            take = max(1, take)
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
    """Half-sample ``b``: the sorted indices of half the target rows and half the other rows, each ``round(n_c / 2)``
    (half to even) but at least one, drawn with ``numpy.random.default_rng([seed, HALF_SAMPLE_STREAM, b])``: the
    first ``k`` of a permutation of the target rows, then of the other rows. A class of one row is in every
    half-sample, so that each half-sample holds both classes, as the search needs.

    Example:
        >>> half_sample(torch.tensor([True, True, False, False]), seed=0, b=0).shape
        (2,)
        >>> half_sample(torch.tensor([True, False, False, False]), seed=0, b=0)[0].item()  # the one target row
        0
    """
    return _stratified(target, 0.5, np.random.default_rng([seed, HALF_SAMPLE_STREAM, b]), every_class=True)
