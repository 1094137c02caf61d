"""The polish's best cuts of one rule set in bounded memory: its samples' values sorted in place as integer keys,
then scanned a chunk of positions at a time.

:func:`torch_amore.strategies.polish.best_cuts` builds several int64 tables as long as the samples it cuts (about
60 bytes a sample with the sort). Where memory is short (codes on disk, :mod:`torch_amore.data.stream_disk`), a
polish step takes the values of the samples satisfying a rule set's other rules as order-preserving integer keys
(4 bytes a sample for float32 columns, 8 for float64 ones; NaN last), sorts them in place
(``numpy.ndarray.sort``), keeps the keys of the target samples among them apart (sorted too: the target samples
before a cut are found by ``searchsorted``, since cuts fall only between distinct values) and finds the same
intervals in one scan: the best end of an interval for each position, given the running minimum of the prefix
weights ``min_support`` positions back, and the best interval open above. Ties are broken as :func:`best_cuts`
breaks them (the last start of the running minimum, the first best end, the first best open start), so the polish
finds the same rule sets.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["sorted_keys", "scanned_cuts", "key_values"]

_BIG = 1 << 62  # beyond any weight: marks cuts that are not allowed (as in best_cuts)
#: Per key dtype: the float dtype whose bits it holds. Columns of at most 32-bit floats take 4-byte keys (exact: their
#: values are float32 values), others 8-byte keys.
_FLOAT_OF = {torch.int32: torch.float32, torch.int64: torch.float64}


def _key_dtype(dtype: torch.dtype) -> torch.dtype:
    """The key dtype for values of ``dtype``."""
    return torch.int32 if dtype in (torch.float32, torch.float16, torch.bfloat16) else torch.int64


def _keys_of(values: torch.Tensor, key_dtype: torch.dtype) -> torch.Tensor:
    """Order-preserving integer keys of float values (their float32 or float64 bits, -0.0 as 0.0, NaN the largest
    key)."""
    v = values.to(_FLOAT_OF[key_dtype]) + 0.0  # -0.0 + 0.0 is 0.0: equal values, equal keys
    bits = v.view(key_dtype)
    top = torch.iinfo(key_dtype).max
    keys = torch.where(bits < 0, bits ^ top, bits)  # negative floats: magnitude bits flipped
    return keys.masked_fill_(torch.isnan(v), top)


def key_values(keys: torch.Tensor) -> torch.Tensor:
    """The float values of keys of :func:`sorted_keys` (float32 for 4-byte keys, float64 for 8-byte ones; NaN for
    the NaN key).

    Example:
        >>> v = torch.tensor([-2.5, -0.0, 0.0, 1.0, float("nan")], dtype=torch.float64)
        >>> key_values(_keys_of(v, torch.int64)).tolist()[:4]
        [-2.5, 0.0, 0.0, 1.0]
    """
    top = torch.iinfo(keys.dtype).max
    bits = torch.where(keys < 0, keys ^ top, keys)
    return bits.view(_FLOAT_OF[keys.dtype]).masked_fill(keys == top, float("nan"))


def sorted_keys(
    column: torch.Tensor, inside: torch.Tensor, target: torch.Tensor, chunk: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The sorted keys of the values ``column[inside]`` and those of its observed target samples, built ``chunk``
    rows at a time (CPU tensors, sorted in place; 4 bytes a value for columns of float32 or narrower, else 8).

    Example:
        >>> column = torch.tensor([3.0, float("nan"), 1.0, 2.0, 1.0])
        >>> keys, hits = sorted_keys(column, torch.tensor([True, True, True, False, True]),
        ...                          torch.tensor([True, True, False, True, True]), 2)
        >>> key_values(keys).tolist()[:3], key_values(hits).tolist()
        ([1.0, 1.0, 3.0], [1.0, 3.0])
    """
    parts = [
        (inside[r0 : r0 + chunk], target[r0 : r0 + chunk], column[r0 : r0 + chunk])
        for r0 in range(0, column.shape[0], chunk)
    ]
    sizes = [(int(i.sum()), int((i & t & ~torch.isnan(c)).sum())) for i, t, c in parts]
    key_dtype = _key_dtype(column.dtype)
    np_dtype = np.int32 if key_dtype == torch.int32 else np.int64
    keys = np.empty(sum(s for s, _ in sizes), dtype=np_dtype)
    hits = np.empty(sum(h for _, h in sizes), dtype=np_dtype)
    at = [0, 0]
    for (i, t, c), (s, h) in zip(parts, sizes):
        values = c[i]  # selected once
        k = _keys_of(values, key_dtype)
        keys[at[0] : at[0] + s] = k.numpy()
        hits[at[1] : at[1] + h] = k[t[i] & ~torch.isnan(values)].numpy()
        at = [at[0] + s, at[1] + h]
    keys.sort()
    hits.sort()
    return torch.from_numpy(keys), torch.from_numpy(hits)


class _Scan:
    """The scan's running state for K kappas: the running minimum of the allowed prefix weights (value, position)
    up to the lagging position, the best end so far and the best start of an interval open above."""

    def __init__(self, k: int) -> None:
        z = torch.zeros(k, dtype=torch.long)
        self.run_min, self.run_arg = z + _BIG, z.clone()
        self.best, self.end, self.start = z - _BIG, z.clone(), z.clone()
        self.tail_min, self.tail_start = z + _BIG, z.clone()


def _allowed_weights(
    keys: torch.Tensor, hit_keys: torch.Tensor, p0: int, p1: int, kappas: torch.Tensor, n_obs: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Positions ``[p0, p1)``: whether a cut is allowed there (0, N and between distinct keys) and the prefix weights
    ``1000 * hits - kappa * samples`` before it (K, p1 - p0)."""
    n = keys.shape[0]
    pos = torch.arange(p0, p1)
    allowed = torch.ones(p1 - p0, dtype=torch.bool)
    inner = (pos > 0) & (pos < n)
    at = pos[inner]
    allowed[inner] = keys[at] != keys[at - 1]
    ct = torch.zeros(p1 - p0, dtype=torch.long)
    ct[inner] = torch.searchsorted(hit_keys, keys[at])
    ct[pos == n] = hit_keys.shape[0]
    cb = pos.clamp(max=n_obs)
    return allowed, ct.mul(1000).unsqueeze(0) - kappas.unsqueeze(1) * cb.unsqueeze(0)


def _scan_chunk(
    state: _Scan,
    keys: torch.Tensor,
    hit_keys: torch.Tensor,
    q0: int,
    q1: int,
    kappas: torch.Tensor,
    n_obs: int,
    min_support: int,
) -> None:
    """Lagging positions ``q`` in ``[q0, q1)``: the running minimum, the open-above starts among them, and the ends
    ``q + min_support`` (those before the first NaN)."""
    allowed, pw = _allowed_weights(keys, hit_keys, q0, q1, kappas, n_obs)
    masked = pw.masked_fill(~allowed, _BIG)
    run, arg = torch.cummin(torch.cat([state.run_min[:, None], masked], 1), 1)  # ties: the last, as cummin
    run, arg = run[:, 1:], torch.where(arg[:, 1:] == 0, state.run_arg[:, None], arg[:, 1:] + (q0 - 1))
    state.run_min, state.run_arg = run[:, -1], arg[:, -1]
    q = torch.arange(q0, q1)
    tail = masked.masked_fill(((q < 1) | (q > n_obs - min_support)).unsqueeze(0), _BIG)
    t_min, t_at = tail.min(1)  # the first
    better = t_min < state.tail_min
    state.tail_min = torch.where(better, t_min, state.tail_min)
    state.tail_start = torch.where(better, t_at + q0, state.tail_start)
    e0, e1 = q0 + min_support, min(q1 + min_support, n_obs)
    if e1 <= e0:
        return
    ok, pe = _allowed_weights(keys, hit_keys, e0, e1, kappas, n_obs)
    cand = (pe - run[:, : e1 - e0]).masked_fill_(~ok.unsqueeze(0), -_BIG)
    c_max, c_at = cand.max(1)  # the first
    better = c_max > state.best
    state.best = torch.where(better, c_max, state.best)
    state.end = torch.where(better, c_at + e0, state.end)
    state.start = torch.where(better, arg.gather(1, c_at[:, None])[:, 0], state.start)


def scanned_cuts(
    keys: torch.Tensor, hit_keys: torch.Tensor, min_support: int, kappas: torch.Tensor, chunk: int
) -> dict[str, torch.Tensor]:
    """:func:`torch_amore.strategies.polish.best_cuts` of one row whose samples are all inside, from the sorted keys
    of their values ``keys`` (N,) and of their observed target samples ``hit_keys`` (:func:`sorted_keys`), in one
    scan of ``chunk`` positions at a time (see the module docstring). ``kappas`` (1, K) as there; the same result
    (``near``: positions in ``keys``).

    Example:
        >>> keys, hits = sorted_keys(torch.tensor([0.0, 1.0, 2.0, 3.0, 4.0]), torch.ones(5, dtype=torch.bool),
        ...                          torch.tensor([False, True, True, False, False]), 2)
        >>> b = scanned_cuts(keys, hits, 1, torch.tensor([[500]]), 2)
        >>> b["start"].tolist(), b["end"].tolist(), b["hits"].tolist(), b["valid"].tolist(), b["near"].tolist()
        ([[1]], [[3]], [[2]], [[True]], [[0, 2, 1, 3]])
    """
    n = keys.shape[0]
    nan_key = torch.tensor([torch.iinfo(keys.dtype).max], dtype=keys.dtype)
    n_obs = int(torch.searchsorted(keys, nan_key)[0])  # NaN keys last
    k = kappas.reshape(-1)
    state = _Scan(k.shape[0])
    last_q = max(n_obs - min_support, 0)  # lagging positions: starts of ends before n_obs, open-above starts
    for q0 in range(0, last_q + 1, chunk):
        _scan_chunk(state, keys, hit_keys, q0, min(q0 + chunk, last_q + 1), k, n_obs, min_support)
    _, pw_end = _allowed_weights(keys, hit_keys, n, n + 1, k, n_obs)
    tail_val = pw_end[:, 0] - state.tail_min
    use_tail = tail_val > state.best
    best = torch.where(use_tail, tail_val, state.best)
    start = torch.where(use_tail, state.tail_start, state.start)
    end = torch.where(use_tail, n, state.end)
    return _finish(keys, hit_keys, n_obs, start, end, best)


def _finish(
    keys: torch.Tensor, hit_keys: torch.Tensor, n_obs: int, start: torch.Tensor, end: torch.Tensor, best: torch.Tensor
) -> dict[str, torch.Tensor]:
    """The outputs of :func:`best_cuts` from the chosen cuts: bounds opened where nothing lies beyond them, counts
    and the positions of the samples next to the cuts."""
    n = keys.shape[0]
    b0, b1 = start.clamp(max=n_obs), end.clamp(max=n_obs)  # samples before each cut

    def hits_before(p: torch.Tensor) -> torch.Tensor:
        inner = torch.searchsorted(hit_keys, keys[p.clamp(max=max(n - 1, 0))]) if n else p
        return torch.where(p >= n, hit_keys.shape[0], torch.where(p == 0, 0, inner))

    t0, t1 = hits_before(start), hits_before(end)
    start = torch.where(b0 == 0, 0, start)
    end = torch.where(b1 == n_obs, n, end)
    support, hits = b1 - b0, t1 - t0

    def position(c: torch.Tensor) -> torch.Tensor:  # of the c-th sample counted (best_cuts' positions)
        return torch.where(c == 0, -1, torch.where(c > n_obs, n, c - 1))

    near = torch.cat([position(b0), position(b1), position(b0 + 1), position(b1 + 1)]).clamp_(0, max(n - 1, 0))
    one = {"start": start, "end": end, "hits": hits, "support": support, "valid": (best > 0) & (support > 0)}
    out = {name: t[None] for name, t in one.items()}
    out["near"] = near[None]
    return out
