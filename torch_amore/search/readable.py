"""Rules from grid intervals, their bounds snapped to readable numbers that select the same samples.

A search ends with grid intervals ``(feature, g_low, g_high)`` of a :class:`torch_amore.grids.binning.Binned`. Any
number strictly above the largest observed value below an edge and at most the smallest observed value from it on
selects the same samples; :func:`torch_amore.rules.cuts.short_cut` picks the shortest. The observed neighbours of
every edge come from one batched ``scatter_reduce`` and cross to the host in one ``.tolist()``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from torch_amore._utils import distributed as D
from torch_amore._utils.transfer import tensor_on
from torch_amore.grids.binning import Binned
from torch_amore.rules.cuts import short_cut
from torch_amore.rules.rule import Rule

__all__ = ["ReadableRules", "between"]

#: Values whose cells :func:`_cell_extremes` scatters at once: its index and value buffers (12 bytes a value) are
#: reused from chunk to chunk, since fresh memory of that size is slow to touch.
_SCATTER_VALUES = 1 << 21
#: Values :func:`_cell_extremes` reads from X's columns in one pass (32 MiB of float32), from :data:`_READ_ROWS` rows
#: on where that is more columns than it scatters at once.
_READ_VALUES = 1 << 23
_READ_ROWS = 1 << 18

Cond = tuple[int, int, int]  # (searched feature, first grid, last grid)


def between(a: float, b: float, bound: float, units: tuple[float, float]) -> float:
    """A short cut in ``(a, b]`` (:func:`torch_amore.rules.cuts.short_cut`) for a grid edge ``bound`` whose observed
    neighbours are ``a < bound <= b``; with no value on one side, a short number beyond the other one (``bound`` when
    there is no value at all).

    Example:
        >>> between(0.4998, 0.5018, 0.5003, (1.0, 0.0)), between(-math.inf, 3.7, 3.2, (1.0, 0.0))
        (0.5, 0.0)
    """
    if not math.isfinite(a) and not math.isfinite(b):
        return bound
    if not math.isfinite(a):
        a = b - abs(b) - 1.0
    elif not math.isfinite(b):
        b = a + abs(a) + 1.0
    return short_cut(a, b, *units) if math.isfinite(a) and math.isfinite(b) and a < b else bound


class ReadableRules:
    """Builds :class:`torch_amore.rules.rule.Rule` objects from grid intervals of any binning of ``X``.

    Args:
        X: (N, F) the searched data (``None``: bounds stay on the grid edges).
        names: a name per column of ``X``.
        scale, offset: printed units per column (``raw = x * scale + offset``).

    Example:
        >>> import torch
        >>> from torch_amore.grids.binning import bin_features
        >>> X = torch.tensor([[0.12], [0.31], [0.58], [0.93]], dtype=torch.float64)
        >>> b = bin_features(X, [0], ["float"], n_grids=4)
        >>> [str(r) for r in ReadableRules(X, ["x"], [1.0], [0.0]).rules(b, [(0, 1, 2)])]
        ['0.4 <= x < 0.8']
    """

    #: On a binning of at most this many grids, every edge of a feature is fetched with its first one (the same pass
    #: over its values) and kept for later calls; a search of many targets over the same binnings keeps them all.
    all_edges_grids: float = 64

    def __init__(
        self, X: torch.Tensor | None, names: Sequence[str], scale: Sequence[float], offset: Sequence[float]
    ) -> None:
        self.X = X
        self.names = list(names)
        self.scale = list(scale)
        self.offset = list(offset)
        self._cuts: dict[tuple, float] = {}
        self._edges: dict[int, tuple[Binned, dict]] = {}  # per binning: the edges' observed neighbours fetched so far

    def rules(self, binned: Binned, conds: Sequence[Cond], *, local: bool = False) -> list[Rule]:
        """The rule of each ``(j, g_low, g_high)`` in ``conds`` (searched feature ``j`` of ``binned``), bounds
        snapped to readable numbers selecting the same samples (``local``: that also keep every value of those
        grids inside, e.g. a local sample's). At most one host sync for all of them; on a binning of few grids
        (:attr:`all_edges_grids`) every edge of a feature is fetched with its first, and kept for later calls."""
        conds = [tuple(int(v) for v in c) for c in conds]
        cat = [binned.kinds[j] == "cat" for j, _, _ in conds]
        edges = {(j, g) for (j, lo, hi), c in zip(conds, cat) if not c for g in (lo, hi + 1) if 0 < g < binned.n_grids}
        near = {} if D.is_sharded() else self._edges.setdefault(id(binned), (binned, {}))[1]
        if binned.n_grids <= self.all_edges_grids:  # (the same pass over a feature's values finds them all)
            every = range(1, min(binned.n_grids, binned.n_bins_max))
            edges |= {(j, g) for j in {j for j, _ in edges - near.keys()} for g in every}
        cells = sorted({(j, lo) for (j, lo, _), c in zip(conds, cat) if c})
        fetched, values = self._fetch(binned, sorted(edges - near.keys()), cells)
        near.update(fetched)
        out = []
        for (j, lo, hi), c in zip(conds, cat):
            if not c:
                out.append(self._interval(binned, j, lo, hi, near, local))
                continue
            col = binned.columns[j]
            scale, offset = self.scale[col], self.offset[col]
            out.append(Rule(col, self.names[col], value=values[(j, lo)], kind="cat", scale=scale, offset=offset))
        return out

    def _interval(self, binned: Binned, j: int, g_low: int, g_high: int, near: dict, local: bool) -> Rule:
        """The rule of numeric grids ``g_low..g_high`` of feature ``j`` from the edges' observed neighbours."""
        col, kind = binned.columns[j], binned.kinds[j]
        units = (self.scale[col], self.offset[col])
        n = binned.n_grids
        if self.X is None or local or any(g in range(1, n) and (j, g) not in near for g in (g_low, g_high + 1)):
            low, high = binned.interval_bounds(j, g_low, g_high)  # the grid edges themselves
        else:
            low, high = -math.inf, math.inf
        if self.X is not None:
            if 0 < g_low < n:
                low = self._cut(near[(j, g_low)], low, units, "low" if local else "any", binned, j, g_low)
            if 0 < g_high + 1 < n:
                high = self._cut(near[(j, g_high + 1)], high, units, "high" if local else "any", binned, j, g_high + 1)
        identity = units == (1.0, 0.0)
        if kind == "int" and binned.int_valued[j] and identity:
            # on integer-valued data, x >= low <=> x >= ceil(low) and x < high <=> x < ceil(high)
            low = math.ceil(low) if low > -math.inf else low
            high = math.ceil(high) if high < math.inf else high
        elif kind == "int" and not binned.int_valued[j] and identity:
            kind = "float"
        return Rule(col, self.names[col], low=low, high=high, kind=kind, scale=units[0], offset=units[1])

    def _cut(
        self, ab: tuple[float, float], bound: float, units: tuple, side: str, binned: Binned, j: int, g: int
    ) -> float:
        """The readable cut between an edge's observed neighbours ``ab``; ``side="low"``/``"high"``: also keep every
        value the grid edge ``bound`` keeps above/below it."""
        a, b = ab
        if side == "low":  # keeps the values >= bound inside
            b = min(b, bound)
        elif side == "high":  # keeps the values < bound inside
            a = max(a, math.nextafter(bound, -math.inf))
        if not math.isfinite(a) and not math.isfinite(b) and not math.isfinite(bound):
            bound = binned.interval_bounds(j, g, binned.n_grids - 1)[0]  # no value at all: the edge itself
        key = (a, b, bound, units)
        if key not in self._cuts:
            self._cuts[key] = between(a, b, bound, units)
        return self._cuts[key]

    def _fetch(self, binned: Binned, edges: list[tuple[int, int]], cells: list[tuple[int, int]]) -> tuple[dict, dict]:
        """Observed neighbours ``(largest value below, smallest value from it on)`` of each grid edge ``(j, g)``
        (infinite where there is none) and the category value of each ``(j, g)`` in ``cells``: one ``.tolist()``."""
        parts: list[torch.Tensor] = []
        if self.X is not None and edges:
            parts.append(self._neighbours(binned, edges).reshape(-1))
        if cells:
            j = tensor_on([c[0] for c in cells], device=binned.categories.device)
            g = tensor_on([c[1] for c in cells], device=binned.categories.device)
            parts.append(binned.categories[j, g])
        if not parts:
            return {}, {}
        host = torch.cat(parts).tolist()  # all in the binning's float dtype
        near: dict = {}
        if self.X is not None and edges:
            n = len(edges)
            near = {e: (host[i], host[n + i]) for i, e in enumerate(edges)}
            host = host[2 * n :]
        return near, dict(zip(cells, host))

    def _neighbours(self, binned: Binned, edges: list[tuple[int, int]]) -> torch.Tensor:
        """(2, E): per edge ``(j, g)``, the largest observed value in grids < g and the smallest in grids >= g."""
        X = self.X
        dt = binned.thresholds.dtype
        feats = sorted({j for j, _ in edges})
        row = {j: r for r, j in enumerate(feats)}
        width = binned.n_bins_max + 1  # the last cell: missing values, unused
        nf = len(feats)
        host = [feats, [binned.columns[j] for j in feats], [row[j] for j, _ in edges], [g for _, g in edges]]
        fidx, cidx, r, g = tensor_on([v for part in host for v in part], device=X.device).split(
            [nf, nf, len(edges), len(edges)]
        )
        # minima and maxima in X's own floating dtype (exact: they are values of X), converted once at the end
        vdt = X.dtype if X.is_floating_point() else dt
        lows, highs = _cell_extremes(binned, X, fidx, cidx, width, vdt)
        lows, highs = lows.view(nf, width)[:, :-1].to(dt), highs.view(nf, width)[:, :-1].to(dt)
        if D.is_sharded():
            lows, highs = D.all_reduce_min(lows.contiguous()), D.all_reduce_max(highs.contiguous())
        above = lows.flip(1).cummin(1).values.flip(1)  # the smallest value in grids >= g
        below = highs.cummax(1).values  # the largest value in grids <= g
        return torch.stack([below[r, g - 1], above[r, g]])


def _cell_extremes(
    binned: Binned, X: torch.Tensor, fidx: torch.Tensor, cidx: torch.Tensor, width: int, vdt: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """(F' x width,) minima and maxima (``+inf``/``-inf`` if empty) in ``vdt`` of X's columns ``cidx`` per grid cell of
    the searched features ``fidx``, about :data:`_SCATTER_VALUES` values at a time, into reused buffers. From
    :data:`_READ_ROWS` rows on, the values of up to :data:`_READ_VALUES` of them are read in one pass over X's rows
    first (a column of a wide row-major ``X`` alone costs nearly a pass over all of it)."""
    n, nf = X.shape[0], len(fidx)
    lows = torch.full((nf * width,), math.inf, dtype=vdt, device=X.device)
    highs = torch.full((nf * width,), -math.inf, dtype=vdt, device=X.device)
    per = max(1, _SCATTER_VALUES // max(1, n))
    group = per * max(1, _READ_VALUES // n // per) if n >= _READ_ROWS and nf > per else per  # whole chunks
    offsets = torch.arange(0, nf * width, width, device=X.device)
    idx = torch.empty(min(per, nf) * n, dtype=torch.long, device=X.device)
    vals = torch.empty(min(per, nf) * n, dtype=vdt, device=X.device)
    codes_t = binned.codes_t  # the stored column-major codes, if any (no transposed copy made here)
    read = None
    for f0 in range(0, nf, per):
        f, c, m = fidx[f0 : f0 + per], cidx[f0 : f0 + per], min(per, nf - f0)
        if group > per and f0 % group == 0:  # (N, up to group): the next columns' values (and codes), one pass each
            read = X.gather(1, cidx[f0 : f0 + group].expand(n, -1))
            read_codes = None if codes_t is not None else binned.codes.gather(1, fidx[f0 : f0 + group].expand(n, -1))
        k = f0 % group  # the chunk's first column in ``read``
        if read is not None:
            values = read[:, k : k + m]
        if codes_t is not None:  # (m, N): rows of the transposed codes, columns of X as rows
            codes, off = codes_t.index_select(0, f), offsets[f0 : f0 + m, None]
            values = X.t().index_select(0, c) if read is None else values.t()
        else:  # (N, m): a gather keeps the row-major layout (index_select along dim 1 is several times slower)
            off = offsets[f0 : f0 + m]
            codes = binned.codes.gather(1, f.expand(n, m)) if read is None else read_codes[:, k : k + m]
            # the values gathered straight into the buffer where the dtypes agree (no fresh temporary)
            if read is None:
                values = None if X.dtype == vdt else X.gather(1, c.expand(n, m))
        at, v = idx[: m * n], vals[: m * n]
        torch.add(codes, off, out=at.view(codes.shape))
        if values is None:
            torch.gather(X, 1, c.expand(n, m), out=v.view(n, m))
        else:
            v.view(values.shape).copy_(values)
        lows.scatter_reduce_(0, at, v, "amin")
        highs.scatter_reduce_(0, at, v, "amax")
    return lows, highs
