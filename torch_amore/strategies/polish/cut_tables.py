"""The best interval of cut positions over sorted values: per row and kappa, from prefix sums on fixed-size tables
(the polish's step on whole sorted columns, :mod:`torch_amore.strategies.polish.sweep`)."""

from __future__ import annotations

import torch

from torch_amore.strategies.polish.sorted_columns import _CHUNK_BYTES

__all__ = ["best_cuts"]

_BIG = 1 << 62  # beyond any weight: marks cuts that are not allowed


def best_cuts(
    inside: torch.Tensor, hit: torch.Tensor, allowed: torch.Tensor, min_support: int, kappas: torch.Tensor
) -> dict[str, torch.Tensor]:
    """Per row and kappa, the interval of positions ``start <= i < end`` maximising
    ``sum(1000 * hit - kappas * inside)`` with at least ``min_support`` rows inside, cut only where ``allowed``.

    ``inside``/``hit`` (S, N) are 0/1 flags in sorted order, ``allowed`` (S, N + 1) the cut positions (between
    distinct values; 0 and N always), ``kappas`` (S, K) integer weights (1000 * kappa). The interval holding every
    row is no condition and is left out; ties and the opening of bounds with nothing beyond them follow
    :func:`torch_amore.strategies.best_interval.best_intervals`, so the rows selected are the ones it selects on the
    distinct values.
    Returns ``start``, ``end``, ``hits``, ``support`` and ``valid`` (a positive value), each (S, K), and ``near``
    (S, 4K): the positions of the inside rows next to the cuts, in blocks of K: the last one before ``start``, before
    ``end``, the first one at or after ``start``, at or after ``end`` (clamped to ``[0, N)``: where there is none,
    the bound is open or the interval empty). Working memory: four (S, N + 1) int64 tables and three (S, K', N + 1)
    int64 ones, K' kappas at a time (about ``_CHUNK_BYTES`` each).

    Example:
        >>> inside = torch.ones(1, 5, dtype=torch.bool); hit = torch.tensor([[False, True, True, False, False]])
        >>> allowed = torch.ones(1, 6, dtype=torch.bool)
        >>> b = best_cuts(inside, hit, allowed, 1, torch.tensor([[500]]))
        >>> b["start"].tolist(), b["end"].tolist(), b["hits"].tolist(), b["valid"].tolist(), b["near"].tolist()
        ([[1]], [[3]], [[2]], [[True]], [[0, 2, 1, 3]])
    """
    S, N = inside.shape
    K = kappas.shape[1]
    pad = torch.nn.functional.pad
    cb, ct = pad(inside, (1, 0)).cumsum(1), pad(hit, (1, 0)).cumsum(1)  # (S, N + 1) each
    total = cb[:, N:]
    pos = _positions(cb)
    last = pos.gather(1, (cb - (min_support - 1)).clamp_(0, N + 1))  # the last start keeping min_support rows
    # cuts that cannot end an interval (fewer than min_support rows before them, or none after) and that cannot
    # start the interval to the end (none before them, or fewer than min_support rows after)
    blocked = ~allowed
    no_end, no_tail = blocked | torch.stack([(last < 0) | (cb >= total), (cb <= 0) | (cb > total - min_support)])
    m = last.clamp_(min=0)
    tables = cb, ct, blocked, no_end, no_tail, m
    per = max(1, _CHUNK_BYTES // (8 * (N + 1) * S))  # kappas at a time
    if per >= K:
        best_val, start, end = _best_of(*tables, kappas)
    else:
        parts = [_best_of(*tables, kappas[:, i : i + per]) for i in range(0, K, per)]
        best_val, start, end = (torch.cat(p, 1) for p in zip(*parts))
    cuts = torch.cat([start, end], 1)  # (S, 2K)
    below, upto = cb.gather(1, cuts), ct.gather(1, cuts)  # the counts before each cut
    b0, b1 = below.split(K, 1)
    t0, t1 = upto.split(K, 1)
    start = torch.where(b0 == 0, 0, start)  # nothing below: open
    end = torch.where(b1 == total, N, end)  # nothing above: open
    support, hits = b1 - b0, t1 - t0
    near = pos.gather(1, torch.cat([below, below + 1], 1)).clamp_(0, N - 1)  # the c-th inside row and the next
    return {
        "start": start,
        "end": end,
        "hits": hits,
        "support": support,
        "valid": (best_val > 0) & (support > 0),
        "near": near,
    }


def _best_of(
    cb: torch.Tensor,
    ct: torch.Tensor,
    blocked: torch.Tensor,
    no_end: torch.Tensor,
    no_tail: torch.Tensor,
    m: torch.Tensor,
    kappas: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The best value, start and end (S, K) of :func:`best_cuts` for the kappas ``kappas`` (S, K), from the counts
    ``cb``/``ct`` (S, N + 1), the cuts not allowed, not allowed as an end, not allowed as the start of an interval
    to the end, and the last start ``m`` keeping ``min_support`` rows: three (S, K, N + 1) int64 tables."""
    S, K, n = cb.shape[0], kappas.shape[1], cb.shape[1]
    weights = kappas.unsqueeze(2), cb.unsqueeze(1), ct.unsqueeze(1)
    pw = _weights(*weights)  # (S, K, N + 1)
    run_min, arg_min = torch.cummin(pw.masked_fill_(blocked.unsqueeze(1), _BIG), dim=2)
    at = m.unsqueeze(1).expand(S, K, n)
    value = torch.gather(run_min, 2, at, out=pw)
    pw = _weights(*weights, out=run_min)  # again, in the table of run_min (one table less than keeping it)
    best_val, end = torch.sub(pw, value, out=value).masked_fill_(no_end.unsqueeze(1), -_BIG).max(dim=2)
    del value
    start = arg_min.gather(2, at.gather(2, end.unsqueeze(2))).squeeze(2)
    del arg_min
    tail_min, tail_start = pw.masked_fill(no_tail.unsqueeze(1), _BIG).min(dim=2)
    tail_val = pw.select(2, n - 1) - tail_min
    use_tail = tail_val > best_val
    best_val = torch.where(use_tail, tail_val, best_val)
    start = torch.where(use_tail, tail_start, start)
    end = torch.where(use_tail, n - 1, end)
    return best_val, start, end


def _weights(kappas: torch.Tensor, cb: torch.Tensor, ct: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """The prefix weights ``1000 * ct - kappas * cb`` (int64, in ``out`` if given)."""
    return torch.mul(kappas, cb, out=out).neg_().add_(ct, alpha=1000)


def _positions(cb: torch.Tensor) -> torch.Tensor:
    """For counts ``cb`` (S, N + 1) that start at 0 and grow by 0 or 1 (the rows counted before each position), the
    position of the c-th row counted (S, N + 2): -1 for c = 0, N where there is none (one scatter: linear, no binary
    search). ``positions[cb - min_support + 1]`` (clamped to 0) is the last position whose count is at most
    ``min_support`` below each one (-1 where none): ``searchsorted(cb, cb - min_support, right=True) - 1``.

    Example:
        >>> _positions(torch.tensor([[0, 1, 1, 2, 3]])).tolist()
        [[-1, 0, 2, 3, 4, 4]]
    """
    n = cb.shape[1]
    at = torch.arange(-1, n - 1, device=cb.device).expand_as(cb)
    return torch.full((cb.shape[0], n + 1), n - 1, dtype=cb.dtype, device=cb.device).scatter_reduce_(1, cb, at, "amin")
