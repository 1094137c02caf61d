"""The longest frequent itemset of a boolean matrix, found by depth-first branch and bound within a budget.

The search keeps Eclat-style row sets, joins items held by every row at once (closure, pruning a node when a
left-behind item is held by every row, as in LCM; not under ``max_length``), and cuts branches whose bound (the
``min_count``-th largest number of candidate items in a row) cannot beat the best itemset. It stops, with
``exact=False``, past ``max_itemsets`` itemsets (one per ``CELLS_PER_ITEMSET`` cells of its table begun),
``max_bytes`` of live tables or ``max_seconds``. See ``docs/feature_selection.md``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

__all__ = ["CELLS_PER_ITEMSET", "LongestItemset", "longest_frequent_itemset"]

CELLS_PER_ITEMSET = 1 << 16  # an itemset with a larger (rows x candidates) table counts as several against the budget


@dataclass(frozen=True)
class LongestItemset:
    """Result of :func:`longest_frequent_itemset`.

    Attributes:
        items: column indices of the itemset, ascending (empty when no column is frequent).
        count: number of rows holding every item.
        exact: True when the search finished (``items`` is the longest frequent itemset), False when a budget stopped
            it (``items`` is the best itemset found until then).
        n_examined: itemsets the search examined (weighted: see ``CELLS_PER_ITEMSET``).
        stopped_by: the budget that stopped the search (``"max_itemsets"``, ``"max_bytes"`` or ``"max_seconds"``);
            None when it finished.
    """

    items: tuple[int, ...]
    count: int
    exact: bool
    n_examined: int
    stopped_by: str | None = None


class _Stop(Exception):
    """Raised inside the search when a budget is exhausted; its one argument names the budget."""


@dataclass
class _Search:
    """State of one branch-and-bound search (see the module docstring)."""

    used: np.ndarray
    min_count: int
    max_length: int | None
    max_itemsets: int | None
    max_bytes: int | None
    deadline: float | None  # of time.perf_counter()
    best: tuple[int, int, tuple[int, ...]] = (0, 0, ())
    n_examined: int = 0
    live_bytes: int = 0

    def better(self, length: int, count: int, items: tuple[int, ...]) -> bool:
        b_len, b_count, b_items = self.best
        return (length, count) > (b_len, b_count) or ((length, count) == (b_len, b_count) and items < b_items)

    def charge(self, n_cells: int) -> None:
        """Count an examined itemset whose tables hold ``n_cells`` booleans; raise :class:`_Stop` past a budget."""
        self.n_examined += 1 + (n_cells - 1) // CELLS_PER_ITEMSET if n_cells else 1
        self.live_bytes += n_cells
        if self.max_itemsets is not None and self.n_examined > self.max_itemsets:
            raise _Stop("max_itemsets")
        if self.max_bytes is not None and self.live_bytes > self.max_bytes:
            raise _Stop("max_bytes")
        if self.deadline is not None and time.perf_counter() > self.deadline:
            raise _Stop("max_seconds")

    def open(
        self, prefix: tuple[int, ...], rows: np.ndarray, cands: np.ndarray, left: np.ndarray | None
    ) -> list | None:
        """Examine the itemset ``prefix`` (held by ``rows``); return its frame for branching, or None if done."""
        charged = rows.size * cands.size
        self.charge(charged + (0 if left is None else rows.size * left.size))  # before the work, not after
        self.live_bytes -= 0 if left is None else rows.size * left.size  # the left-behind table is temporary
        at_rows = self.used[rows]  # whole rows first: much faster than np.ix_ on a wide matrix
        sub = at_rows[:, cands]
        n = rows.size
        counts = sub.sum(axis=0)
        keep = counts >= self.min_count
        if left is not None:  # closure (no max_length): prune if a left-behind item is in every row
            if left.size:
                left_counts = at_rows[:, left].sum(axis=0)
                if bool((left_counts == n).any()):
                    self.live_bytes -= charged
                    return None
                left = left[left_counts >= self.min_count]
            full = keep & (counts == n)
            prefix = prefix + tuple(cands[full].tolist())
            keep &= ~full
        cands, sub = cands[keep], sub[:, keep]
        items = tuple(sorted(prefix))
        if items and self.better(len(items), n, items):
            self.best = (len(items), n, items)
        at_max = self.max_length is not None and len(prefix) >= self.max_length
        if cands.size == 0 or at_max:
            self.live_bytes -= charged
            return None
        rest = sub.sum(axis=1, dtype=np.int64)  # candidate items per row, minus those already branched on
        return [prefix, rows, cands, left, sub, rest, charged, 0]

    def bound(self, prefix_len: int, row_items: np.ndarray) -> int:
        """Longest itemset reachable: ``prefix_len`` plus the ``min_count``-th largest count in ``row_items``."""
        pos = row_items.size - self.min_count
        reach = prefix_len + int(np.partition(row_items, pos)[pos])
        return reach if self.max_length is None else min(reach, self.max_length)

    def run(self, cols: np.ndarray) -> None:
        n_rows = self.used.shape[0]
        left0 = None if self.max_length is not None else np.empty(0, dtype=np.int64)
        root = self.open((), np.arange(n_rows), cols, left0)
        stack = [] if root is None else [root]
        while stack:
            frame = stack[-1]
            prefix, rows, cands, left, sub, rest, charged, j = frame
            if j == cands.size:
                stack.pop()
                self.live_bytes -= charged
                continue
            frame[7] = j + 1
            has = sub[:, j]
            row_items = rest[has]
            rest -= has
            if row_items.size < self.min_count:
                continue
            reach = self.bound(len(prefix), row_items)
            b_len, b_count, _ = self.best
            if reach < b_len or (reach == b_len and row_items.size < b_count):
                continue
            child_left = None if left is None else np.concatenate([left, cands[:j]])
            child = self.open(prefix + (int(cands[j]),), rows[has], cands[j + 1 :], child_left)
            if child is not None:
                stack.append(child)


def longest_frequent_itemset(
    used: np.ndarray,
    min_count: int,
    *,
    max_length: int | None = None,
    max_itemsets: int | None = None,
    max_bytes: int | None = None,
    max_seconds: float | None = None,
) -> LongestItemset:
    """The longest set of columns that are all True together in at least ``min_count`` rows of ``used``.

    Ties go to the set held by more rows, then to the lexicographically smallest (ascending) column indices. The
    search is exact unless a budget stops it (see the module docstring); it is deterministic unless ``max_seconds``
    stops it.

    Args:
        used: (N, D) boolean matrix: rows are transactions, columns items.
        min_count: minimum number of rows (>= 1) holding the whole itemset.
        max_length: longest itemset allowed (``None``: no limit).
        max_itemsets: stop after examining this many itemsets (``None``: no limit).
        max_bytes: stop when the row/item tables alive in the search exceed this many bytes (``None``: no limit).
        max_seconds: stop after this many seconds (``None``: no limit).

    Example:
        >>> import numpy as np
        >>> used = np.array([[1, 1, 0, 1], [1, 1, 1, 0], [1, 1, 1, 1], [0, 1, 1, 0]], dtype=bool)
        >>> longest_frequent_itemset(used, 2)
        LongestItemset(items=(0, 1, 2), count=2, exact=True, n_examined=4, stopped_by=None)
        >>> longest_frequent_itemset(used, 2, max_length=1).items
        (1,)
    """
    used = np.ascontiguousarray(used, dtype=bool)
    if used.ndim != 2:
        raise ValueError(f"Expected `used` to be a 2-d boolean matrix, but got shape {used.shape}.")
    if isinstance(min_count, bool) or not isinstance(min_count, (int, np.integer)) or min_count < 1:
        raise ValueError(f"Expected `min_count` to be an integer >= 1, but got {min_count!r}.")
    counts = used.sum(axis=0)
    cols = np.nonzero(counts >= min_count)[0]
    cols = cols[np.lexsort((cols, -counts[cols]))]  # most frequent first: long itemsets are found early
    deadline = None if max_seconds is None else time.perf_counter() + max_seconds
    search = _Search(used, int(min_count), max_length, max_itemsets, max_bytes, deadline)
    stopped_by = None
    try:
        search.run(cols)
    except _Stop as stop:
        stopped_by = stop.args[0]
    _, count, items = search.best
    return LongestItemset(items, count, stopped_by is None, search.n_examined, stopped_by)
