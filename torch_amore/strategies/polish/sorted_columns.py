"""The columns of X argsorted once, with the target in the same order, kept by the extractor for every later
polish (:class:`SortedColumns`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from torch_amore._utils.sorting import argsort_values
from torch_amore._utils.transfer import tensor_on

__all__ = ["SortedColumns"]


_CHUNK_BYTES = 8 << 20  # about the size of one working table: rows, kappas and columns are taken this many at a time


class SortedColumns:
    """Per column of ``X``: an ascending order (ties in any order, NaN last), which of its values are observed, the
    target flags in that order and the allowed cut positions (0, N and between distinct values; NaN counts as one
    run with no cut inside it). One argsort per column, cached; new columns are sorted together, a few at a time
    (about ``_CHUNK_BYTES`` of work each). Cuts fall only between distinct values, so the order within a tie changes
    nothing. The order is int32 where ``N < 2**31``: 7 bytes per row and column; the values themselves are read from
    ``X`` only where they are needed (the few that become cuts). With ``row_chunk`` no column is sorted whole: each
    polish step sorts the values of its rule set's samples in place and scans them ``row_chunk`` positions at a time
    (:mod:`torch_amore.strategies.polish.scanned_cuts`; CPU tensors).

    Example:
        >>> X = torch.tensor([[3.0, 1.0], [1.0, float("nan")], [2.0, 1.0]])
        >>> t = SortedColumns(X, torch.tensor([True, False, False])).get([0, 1])
        >>> t["order"][0].tolist(), t["observed"][1].tolist(), t["allowed"][1].tolist(), t["column"].tolist()
        ([1, 2, 0], [True, True, False], [True, False, True, True], [[0], [1]])
    """

    _FIELDS = ("order", "observed", "hit", "allowed", "column")

    def __init__(self, X: torch.Tensor, target: torch.Tensor, row_chunk: int | None = None) -> None:
        self.X, self.target = X, target
        self.row_chunk = row_chunk  # bounded memory: each polish step sorts and scans its own samples
        self.dtype = torch.float32 if X.device.type == "mps" else torch.float64  # of the cut values on the host
        self._index = torch.int32 if X.shape[0] < 2**31 else torch.int64
        self._slot: dict[int, int] = {}  # column -> row of the tables
        self._tables: dict[str, torch.Tensor] = {}

    def get(self, cols: Sequence[int], *, only_sort: bool = False) -> dict[str, torch.Tensor]:
        """The tables of the columns ``cols``: ``order``, ``observed`` and ``hit`` (len(cols), N), ``allowed``
        (len(cols), N + 1) and ``column`` (len(cols), 1) (``only_sort``: just sort the new ones). Not to be written
        to (one column's tables are views of the cache)."""
        new = sorted({c for c in cols if c not in self._slot})
        if new:
            per = max(1, _CHUNK_BYTES // (8 * self.X.shape[0] + 8))  # columns sorted at once
            tables = self._sort(new[:per])
            if len(new) > per:  # all into one table each, a few columns at a time
                part, tables = tables, {name: t.new_empty((len(new), *t.shape[1:])) for name, t in tables.items()}
                for i in range(0, len(new), per):
                    for name, t in (part if i == 0 else self._sort(new[i : i + per])).items():
                        tables[name][i : i + per] = t
                del part
            for name in self._FIELDS:
                held = self._tables.get(name)
                self._tables[name] = tables[name] if held is None else torch.cat([held, tables[name]])
            self._slot.update({c: len(self._slot) + i for i, c in enumerate(new)})
        if only_sort:
            return {}
        if len(cols) == 1:  # one column (a large N is taken row by row): views, no copies
            at = self._slot[cols[0]]
            return {name: self._tables[name][at : at + 1] for name in self._FIELDS}
        idx = tensor_on([self._slot[c] for c in cols], device=self.X.device)
        return {name: self._tables[name].index_select(0, idx) for name in self._FIELDS}

    def sorted_tables(self) -> dict[int, dict[str, torch.Tensor]]:
        """The tables of every column sorted so far that do not depend on the target (``order``, ``observed``,
        ``allowed``, ``column``), per column: views of the cache (for the searches of other targets on these rows).

        Example:
            >>> X = torch.tensor([[3.0], [1.0], [2.0]])
            >>> columns = SortedColumns(X, torch.tensor([True, False, False]))
            >>> _ = columns.get([0])
            >>> columns.sorted_tables()[0]["order"].tolist()
            [[1, 2, 0]]
        """
        target_free = ("order", "observed", "allowed", "column")
        return {c: {name: self._tables[name][at : at + 1] for name in target_free} for c, at in self._slot.items()}

    def _sort(self, cols: list[int]) -> dict[str, torch.Tensor]:
        """The tables of the columns ``cols``, sorted together."""
        column = tensor_on(cols, device=self.X.device)
        values = self.X.t().index_select(0, column)
        if not values.is_floating_point():
            values = values.to(self.dtype)
        order = argsort_values(values, dim=1)  # ties in any order: cuts fall only between distinct values
        values = values.gather(1, order)  # X's own values: equal exactly where they are equal in float64
        observed = ~torch.isnan(values)
        values.masked_fill_(~observed, math.inf)
        edge = torch.ones(len(cols), 1, dtype=torch.bool, device=values.device)
        allowed = torch.cat([edge, values[:, 1:] != values[:, :-1], edge], 1)
        hit = self.target[order] & observed
        return dict(order=order.to(self._index), observed=observed, hit=hit, allowed=allowed, column=column[:, None])
