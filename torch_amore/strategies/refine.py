"""Refinement of the beam's rule sets: coordinate ascent, all states of one length at once. Each condition in turn
is re-optimised given the others (one weighted ``bincount`` per condition position and round, the best interval of
:func:`~torch_amore.strategies.best_interval.best_intervals_dense`, improvements taken with ``torch.where`` on the
device) until nothing changes; fitness never decreases.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from torch_amore._utils import counting
from torch_amore._utils import distributed as D
from torch_amore._utils.transfer import tensor_on
from torch_amore.data.heap import trim_heap
from torch_amore.strategies.best_interval import Objective, best_intervals_dense


@dataclass
class State:
    conds: tuple[tuple[int, int, int], ...]  # (searched feature, g_low, g_high), sorted by feature
    hits: int
    support: int


@dataclass
class _Refining:
    """The working tensors of :meth:`BeamSearch._refine` for a batch of ``n_states`` states of ``length``
    conditions: ``st`` (S, 2 L + 2) holds the lows, highs, hits and support; ``codes`` and ``sat`` one (S, N)
    tensor per position (the doubled codes and whether each sample satisfies that condition)."""

    length: int
    n_states: int
    device: torch.device
    st: torch.Tensor
    cols: list[torch.Tensor]
    stacked: torch.Tensor  # (L, S, N): ``codes`` stacked
    codes: tuple[torch.Tensor, ...]
    weights: torch.Tensor
    wide: int
    edges: torch.Tensor
    sat: list[torch.Tensor | None]  # ``None`` at position 0 until its first cut
    n_bins: tuple[torch.Tensor, ...]
    is_cat: tuple[torch.Tensor, ...]
    cat_at: list[bool]
    kappas: tuple[float, ...]
    n_k: int
    tie: torch.Tensor
    score: torch.Tensor

    def keep(self, at: list[int]) -> None:
        """Only the states ``at`` (rows of the batch) from now on: their rows of every table, each state's codes moved
        to the bins of its new row."""
        both = tensor_on(
            [[a, 2 * self.wide * (i - a)] for i, a in enumerate(at)], device=self.device, dtype=torch.int32
        )
        idx, shift = both[:, 0], both[:, 1:]
        if shift.dtype != self.stacked.dtype:  # an add in the codes' dtype (a widening add copies the table twice)
            shift = shift.to(self.stacked.dtype)
        self.stacked = self.stacked.index_select(1, idx).add_(shift)
        self.codes = self.stacked.unbind(0)
        self.sat = [m.index_select(0, idx) for m in self.sat]
        self.n_bins, self.is_cat = (tuple(t.index_select(0, idx) for t in ts) for ts in (self.n_bins, self.is_cat))
        self.st, self.score = self.st.index_select(0, idx), self.score.index_select(0, idx)
        self.n_states, self.edges = len(at), self.edges[: len(at)]
        self.weights = self.weights[: len(at) * self.codes[0].shape[1]]


def _refined_states(states: list[State], out_rows: list[list], length: int) -> list[State]:
    """The states of :meth:`BeamSearch._refine` from the rows it read (a state that did not move is returned)."""
    out = []
    for state, row in zip(states, out_rows):
        score = (row[2 * length], row[2 * length + 1])
        conds = tuple(zip([c[0] for c in state.conds], row[:length], row[length : 2 * length]))
        out.append(State(conds, *score) if score != (state.hits, state.support) else state)
    return out


def _masked_counts(idx: torch.Tensor, inside: torch.Tensor, size: int, weights: torch.Tensor) -> torch.Tensor:
    """(2 size,) counts of the other samples (at ``2 * bin``) and of the target samples (at ``2 * bin + 1``) per bin
    where ``inside``, from one ``bincount``: ``idx`` (flattened) is ``2 * bin + is_target`` with bins in ``[0, size)``.
    Exact counts from 0/1 weights written into ``weights`` (a float buffer as long as ``idx``, reused: fresh memory of
    this size is slow to touch), or, where weighted ``bincount`` is not allowed (CUDA under
    ``torch.use_deterministic_algorithms``), from indices moved to a spare bin."""
    if idx.is_cuda and torch.are_deterministic_algorithms_enabled():
        spare = torch.full_like(idx, 2 * size)
        return counting.bincount(torch.where(inside, idx, spare), 2 * size + 1)[: 2 * size]
    return counting.bincount(idx, 2 * size, weights.copy_(inside)).round_().long()


class Refinement:
    """The refinement of :class:`~torch_amore.strategies.beam.BeamSearch` (a base class: it reads the search's
    ``codes_t``, ``target``, ``fine``, ``width``, ``n_rows``, ``budget`` and ``refine_budget``)."""

    def _refine(self, states: list[State], min_support: int, obj: Objective) -> list[State]:
        """Coordinate ascent, all states at once: re-optimise each condition given the others until nothing changes.

        The codes of the states' features and whether each sample satisfies each condition are gathered once,
        (L, S, N); for condition position ``k`` one weighted ``bincount`` counts, for every state, the samples
        satisfying its other conditions per grid of condition ``k``'s feature; a state takes the best interval
        (ties: the smallest kappa) where its key beats the state's own (``torch.where``, on the device). A round
        that moves nothing is a fixed point (at most 8 rounds). After the first round only the positions whose other
        intervals moved since they were last cut are cut again: the others would find the interval they hold, which
        never loses to itself, so the result is that of every position every round; likewise a state none of whose
        positions moved in the first round is at its fixed point, and where at most half the states moved, the later
        rounds leave the others out. One ``tolist`` reads the result and which positions moved after the first round,
        then one after each later cut (a later round often cuts one position, finds it in place, and stops early).
        """
        if not states or len(states[0].conds) < 2:
            return states  # a single condition is already the best interval of its feature
        n_rows = self.codes_t.shape[1]
        per_call = max(1, self.refine_budget // (len(states[0].conds) * max(1, n_rows)))
        if len(states) > per_call:  # bounded working memory: states in batches, as few as fit and of even sizes
            n_batches = -(-len(states) // per_call)
            size = -(-len(states) // n_batches)
            return [
                s for i in range(0, len(states), size) for s in self._refine(states[i : i + size], min_support, obj)
            ]
        r = self._refine_tables(states, obj)
        length = r.length
        # when each position was last cut and last moved (for some state of the batch), counted in steps
        cut, move = [-1] * length, [-1] * length
        steps, rows, active = 0, [[]] * len(states), list(range(len(states)))  # each state's last row; those moving
        for rnd in range(8):
            out_rows, any_move, steps = self._refine_round(r, rnd, cut, move, steps, min_support, obj)
            for i, row in zip(active, out_rows):
                rows[i] = row
            if not any_move:
                break
            moving = [a for a, row in enumerate(out_rows) if any(row[2 * length + 2 :])]
            if rnd == 0 and 2 * len(moving) <= len(active):  # fewer rows for every later cut, for a few operations
                r.keep(moving)
                active = moving
        del r
        if getattr(self, "row_chunk", None) is not None:  # bounded memory: the tables' freed pages go back at once
            trim_heap()
        return _refined_states(states, rows, length)

    def _refine_round(
        self,
        r: _Refining,
        rnd: int,
        cut: list[int],
        move: list[int],
        steps: int,
        min_support: int,
        obj: Objective,
    ) -> tuple[list, bool, int]:
        """Round ``rnd`` of :meth:`_refine`: each position cut unless it holds its best. ``cut`` and ``move`` (the
        step at which each position was last cut, last moved) are updated in place; returns the rows read last
        (none when no position was cut), whether some position moved, and the step count."""
        length = r.length
        moved = torch.zeros(r.n_states, length, dtype=torch.long, device=r.device)
        any_move, out_rows = False, []
        for k in range(length):
            if rnd and not any(move[m] > cut[k] for m in range(length) if m != k):
                continue  # its other intervals are where they were when it was last cut: it holds its best
            moved[:, k] = self._cut_position(r, k, min_support, obj)
            cut[k], steps = steps, steps + 1
            if rnd:  # after the first round, a read after each step tells the next position whether it is stale
                out_rows = torch.cat([r.st, moved], 1).tolist()  # the result, and which positions moved
                if any(row[2 * length + 2 + k] for row in out_rows):
                    move[k], any_move = cut[k], True
        if not rnd:  # every position was cut once: one read
            out_rows = torch.cat([r.st, moved], 1).tolist()
            for k in range(length):
                if any(row[2 * length + 2 + k] for row in out_rows):
                    move[k], any_move = cut[k], True
        return out_rows, any_move, steps

    def _refine_tables(self, states: list[State], obj: Objective) -> _Refining:
        """The working tensors of :meth:`_refine` for a batch of states of one length."""
        fine = self.fine
        device = self.codes_t.device
        n_states, length = len(states), len(states[0].conds)
        table = tensor_on([[list(c) for c in s.conds] + [[s.hits, s.support, 0]] for s in states], device=device)
        feats = table[:, :length, 0]
        st = torch.cat([table[:, :length, 1], table[:, :length, 2], table[:, length, :2]], 1)  # lows, highs, hits, n
        cols = [tensor_on([k, length + k, 2 * length, 2 * length + 1], device=device) for k in range(length)]
        n = self.codes_t.shape[1]
        # exact integer counts from float weights: float32 below 2**24 samples
        wdt = torch.float32 if n < (1 << 24) or device.type == "mps" else torch.float64
        weights = torch.empty(n_states * n, dtype=wdt, device=device)  # reused by every count below
        wide = self.width + 1  # the code ``width`` (missing) lands in a column that is dropped
        # each state's bins start at ``state x wide``; per position (S, N): 2 x (code shifted to its state's bins) +
        # is_target, the bincount index of both counts (code >= low <=> index >= 2 low, code <= high <=> index <= 2
        # high + 1: conditions on doubled bounds, from ``edges`` (S, 2): 2 x the state's first bin, and that + 1)
        edges = tensor_on([[2 * i * wide, 2 * i * wide + 1] for i in range(n_states)], device=device)
        # int16 on the CPU where every index fits (half the bytes per row of int32; ``index_add_``, which counts on
        # other devices, takes int32 and int64 only)
        short = device.type == "cpu" and 2 * n_states * wide < (1 << 15)
        idt = torch.int16 if short and self.codes_t.dtype == torch.int16 else torch.int32
        codes = self.codes_t.index_select(0, feats.T.reshape(-1)).view(length, n_states, n).to(idt)
        stacked = codes.mul_(2).add_(edges[:, :1].to(idt)).add_(self.target.to(idt))  # in place
        codes = stacked.unbind(0)
        # lows, then highs: (S, 1) each, in the codes' dtype (a mixed-dtype comparison is several times slower)
        bounds = torch.add(edges.repeat_interleave(length, 1), st[:, : 2 * length], alpha=2).to(idt)
        bounds = bounds.T[..., None].unbind(0)
        # position 0 is cut first, which makes its mask: a mask made here for it would never be read
        sat = [None] + [
            torch.ge(codes[m], bounds[m]).logical_and_(codes[m] <= bounds[length + m]) for m in range(1, length)
        ]
        n_bins, is_cat = fine.n_bins[feats].T.unbind(0), fine.is_cat[feats].T.unbind(0)
        # per position: whether some state's feature there is a category (else the tables skip the categories' path)
        cat_at = [any(fine.is_cat_host[s.conds[k][0]] for s in states) for k in range(length)]
        kappas = obj.kappas(False)
        n_k = len(kappas)
        tie = torch.arange(n_k - 1, -1, -1, device=device)  # ties: the smallest kappa
        score = obj.tensor_score(st[:, 2 * length], st[:, 2 * length + 1])  # each state's own
        return _Refining(
            length,
            n_states,
            device,
            st,
            cols,
            stacked,
            codes,
            weights,
            wide,
            edges,
            sat,
            n_bins,
            is_cat,
            cat_at,
            kappas,
            n_k,
            tie,
            score,
        )

    def _cut_position(self, r: _Refining, k: int, min_support: int, obj: Objective) -> torch.Tensor:
        """One step of :meth:`_refine`: every state's condition at position ``k`` re-optimised given the others;
        ``r`` updated in place. Returns which states moved."""
        inside = functools.reduce(torch.logical_and, [r.sat[m] for m in range(r.length) if m != k])
        both = _masked_counts(r.codes[k].reshape(-1), inside.view(-1), r.n_states * r.wide, r.weights)
        both = D.all_reduce_sum(both).view(r.n_states, r.wide, 2)[:, : self.width]
        tot, tgt = both.sum(2), both[..., 1]
        b = best_intervals_dense(
            tot,
            tgt,
            r.n_bins[k],
            r.is_cat[k],
            min_support,
            r.kappas,
            positive=False,
            max_count=self.n_rows,
            any_cat=r.cat_at[k],
            budget=self.budget,
        )
        found = obj.tensor_score(b.hits, b.support, b.valid)  # (S, K)
        new = torch.cat([b.g_low, b.g_high, b.hits, b.support], 1)  # (S, 4 K)
        if r.n_k > 1:
            pick = (found * r.n_k + r.tie).argmax(1, keepdim=True)  # (S, 1)
            found, new = found.gather(1, pick), new.gather(1, pick + torch.arange(4, device=r.device) * r.n_k)
        found = found[:, 0]
        better = found > r.score
        r.score = torch.where(better, found, r.score)
        new = torch.where(better[:, None], new, r.st.index_select(1, r.cols[k]))
        r.st.index_copy_(1, r.cols[k], new)
        lo_hi = torch.add(r.edges, new[:, :2], alpha=2).to(r.codes[k].dtype)
        # into its old mask (read by no later step): fresh memory is slow to touch
        r.sat[k] = torch.ge(r.codes[k], lo_hi[:, :1], out=r.sat[k]).logical_and_(r.codes[k] <= lo_hi[:, 1:])
        return better
