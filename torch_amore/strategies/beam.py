"""The ``"beam"`` search strategy: fitness-optimal intervals on fine grids, beam search and refinement.

The paper's search (``strategy="paper"``) adds, at each step, the interval with the highest probability *ratio*.
That favours narrow, near-pure regions: once a condition is almost pure no second condition can raise the ratio, and
a first condition taken from the sharpest peak can miss a broader box. The beam strategy keeps AMORE's machinery
(vectorized histogram passes, intervals from grid counts, no rescans of the data per candidate) but optimises the
paper's own objective, fitness, directly:

1. **Fine grids** (made before the search, by :func:`torch_amore.grids.fine_grid.fine_binning`): each numeric feature
   cut into ``n_fine`` equal-width grids, whose codes the search reads column-major (``codes_t``).
2. **Best intervals per feature in linear time.** On the grid counts of a node (``a_g`` target, ``b_g`` all), the
   interval maximising ``sum(a_g - kappa * b_g)`` subject to ``sum(b_g) >= min_support`` is a maximum-subarray problem
   with a prefix constraint: for every end grid the best start is a prefix minimum of the cumulative sums, found with
   ``cummin`` + ``searchsorted`` for all features and nodes at once (:func:`best_intervals`). ``kappa = 0.5``
   maximises fitness; larger kappas trade support for confidence (a Lagrangian sweep); smaller ones, down to the
   target's base rate (weighted relative accuracy), give broad regions of high lift.
3. **Beam search.** All nodes of the beam are counted in one batched pass; each gets its ``beam_width`` best children
   by fitness (and by confidence-then-fitness with ``min_confidence``); before the last length a few children of high
   lift (:class:`Lift`) join the next beam, so that a condition weak alone can be sharpened by the next one. Every
   length is searched alike whatever ``max_length`` (a shorter search's rule sets are a longer one's too).
4. **Refinement.** The children's conditions are re-optimised in turn given the others (coordinate ascent, all
   children at once: one weighted ``bincount`` per condition position and round) until nothing changes; fitness never
   decreases. The ``beam_width`` best rule sets go on to the next length.
5. **Polish** (:meth:`torch_amore.search.extractor.Extractor.polish`): the best rule sets are re-cut between
   observed values, at the shortest number that selects the same samples (:func:`torch_amore.rules.cuts.short_cut`).

The search is organised by length, not by node, and decides on the device: per length one ``nonzero`` gives the
samples of all beam nodes, the children are ranked with ``argsort`` on exact integer keys and only each node's best
few cross to the host (one ``tolist``), refinement takes its improvements with ``torch.where`` and reads its result
once it has converged (one ``tolist`` per check); thresholds of the fine grids are computed on the host
(:meth:`torch_amore.grids.fine_grid.FineBinned.interval_bounds`).

Every rule set found (and all of the paper strategy's rule sets, which run too) is returned, sorted by fitness, so the
beam strategy's best fitness is never below the paper strategy's.
"""

from __future__ import annotations

import itertools
import math

import torch

from torch_amore._utils import distributed as D
from torch_amore._utils.progress import progress_bar
from torch_amore._utils.transfer import tensor_on
from torch_amore.grids.binning import Binned
from torch_amore.rules.masks import count_true
from torch_amore.rules.metrics import base_rate, fitness_value
from torch_amore.strategies.all_rows import AllRows
from torch_amore.strategies.best_interval import (
    DenseBest,
    Lift,
    Objective,
    _descending_order,
    best_intervals_dense,
    fetch_length,
    packed_keys,
    table_budget,
)
from torch_amore.strategies.node_counts import NodeCounts, narrow_block
from torch_amore.strategies.refine import Refinement, State


def _first_per_features(pool: dict[tuple, State], obj: Objective) -> list[State]:
    """The best state of ``pool`` (by ``obj``) on each set of features: children on the same features tend to
    climb to the same optimum, so only these are refined."""
    first: dict[tuple, State] = {}
    for st in sorted(pool.values(), key=lambda s: obj.key(s.hits, s.support), reverse=True):
        first.setdefault(tuple(c[0] for c in st.conds), st)
    return list(first.values())


def _seed_beam(seeds: list[tuple[tuple, ...]], chosen: dict[tuple, State]) -> list[State]:
    """The conditions of the seed pairs none of whose features the beam (``chosen``) expands already."""
    held = {c[0] for conds in chosen for c in conds}
    new = [c for pair in seeds if not any(c[0] in held for c in pair) for c in pair]
    return [State((c,), 0, 0) for c in dict.fromkeys(new)]  # expanded beside the beam


#: Bytes of the (rule sets x samples) masks and codes that :meth:`BeamSearch._without_idle_conditions` makes at once.
_MASK_BYTES = 1 << 25

#: Elements of the (conditions x states x samples) tables of one refinement batch: a quarter of the binned data's
#: values within these bounds (about 15 bytes of working memory each: about half of X's bytes, at least 60 MiB and
#: at most 2 GiB).
_REFINE_BUDGET = 1 << 27
_REFINE_BUDGET_MIN = 1 << 22


class BeamSearch(NodeCounts, Refinement):
    """Beam search with fitness-optimal intervals and refinement on a fine binning (see module docstring).

    The nodes of one length are expanded together: their samples come from one ``nonzero`` over their stacked
    masks, one batched histogram pass (:func:`~torch_amore.grids.ratios.group_grid_counts`) counts them, one
    :func:`best_intervals_dense` call per kappa family gives their candidates, and each node's best candidates per
    objective are sorted on the device; only those few cross to the host (one ``tolist`` per length). The children
    are refined together, one weighted ``bincount`` per condition position and round, their improvements taken on
    the device.
    """

    def __init__(
        self,
        fine: Binned,
        target: torch.Tensor,
        n_target: int,
        beam_width: int = 5,
        min_confidence: float | None = None,
        row_chunk: int | None = None,
        all_rows: AllRows | None = None,
    ) -> None:
        self.fine = fine
        self.all_rows = all_rows  # the counts of all rows, made once for the searches of several targets
        self._root_target: torch.Tensor | None = None
        self.target = target
        self.n_target = n_target
        self.beam_width = beam_width
        self.width = fine.n_bins_max
        self.n_rows = D.global_count(fine.codes.shape[0])  # a bound on every count (host-known: no sync)
        self.codes_t = fine.column_major()  # (F, N): what the counting passes read (stored by the fine binning)
        n_values = self.n_rows * len(fine.columns)
        self.budget = table_budget(n_values)  # small data: small tables
        self.refine_budget = min(_REFINE_BUDGET, max(_REFINE_BUDGET_MIN, n_values // 4))
        self.row_chunk = row_chunk  # count nodes a chunk of rows at a time (codes on disk)
        if row_chunk is not None:  # little memory: one rule set refined at a time
            self.refine_budget = 1
        self.narrow = narrow_block(getattr(fine, "n_bins_host", None))
        host = getattr(fine, "is_cat_host", None)
        self.any_cat = any(host) if host is not None else bool(fine.is_cat.any())
        self.objectives = [Objective()] + ([Objective(min_confidence)] if min_confidence is not None else [])
        # plus the target's base rate (maximising sum(a - rate * b) is weighted relative accuracy, the broad regions
        # of high lift that subgroup discovery and tree splits favour) and half-way to 0.5
        rate = base_rate(n_target, self.n_rows)
        rate, half = round(min(0.999, max(0.001, rate)), 3), round(min(0.999, max(0.001, (rate + 0.5) / 2)), 3)
        self.lift = Lift(rate)
        self.kappas = tuple(sorted(set(self.objectives[-1].kappas()) | {rate, half}))

    def _dense(
        self, tot: torch.Tensor, tgt: torch.Tensor, feats: torch.Tensor, min_support: int, kappas: tuple[float, ...]
    ) -> DenseBest:
        """:func:`best_intervals_dense` of count rows on searched features ``feats`` (no host sync)."""
        fine = self.fine
        return best_intervals_dense(
            tot,
            tgt,
            fine.n_bins[feats],
            fine.is_cat[feats],
            min_support,
            kappas,
            positive=False,
            max_count=self.n_rows,
            any_cat=self.any_cat,
            budget=self.budget,
        )

    def _dense_every(
        self, tot: torch.Tensor, tgt: torch.Tensor, every: torch.Tensor, g: int, min_support: int, kappas: tuple
    ) -> DenseBest:
        """:meth:`_dense` of the (G * F, width) counts of every feature of ``g`` nodes; a block of features of few
        grids (:func:`~torch_amore.strategies.node_counts.narrow_block`: a one-hot-heavy table) on its first grids
        only (the same intervals: no sample lies beyond a feature's grids), the other features on all."""
        if self.narrow is None:
            return self._dense(tot, tgt, every, min_support, kappas)
        n_feat, (a, b, w) = len(self.fine.columns), self.narrow
        parts = []
        for f0, f1, width in ((0, a, self.width), (a, b, w), (b, n_feat, self.width)):
            if f1 > f0:
                rows = [c.view(g, n_feat, -1)[:, f0:f1, :width].reshape(-1, width) for c in (tot, tgt)]
                feats = every.view(g, n_feat)[:, f0:f1].reshape(-1)
                parts.append((f1 - f0, self._dense(*rows, feats, min_support, kappas)))
        fields = DenseBest.__dataclass_fields__
        return DenseBest(
            *(torch.cat([getattr(d, k).view(g, n, -1) for n, d in parts], 1).view(g * n_feat, -1) for k in fields)
        )

    def root_target_counts(self) -> torch.Tensor:
        """(F, W) target rows per fine grid with ``all_rows`` (kept: the pair seeds read them too)."""
        if self._root_target is None:
            self._root_target = self.all_rows.target_counts(self.target)
        return self._root_target

    def _root_counts(self) -> torch.Tensor:
        """The root's :meth:`_node_counts`; with ``all_rows``, all rows' counts less the target's (the same)."""
        if self.all_rows is None:
            return self._node_counts([()])
        tgt = self.root_target_counts()
        return torch.stack([self.all_rows.counts - tgt, tgt])

    def _candidates(
        self, beam: list[State], tot: torch.Tensor, tgt: torch.Tensor, min_support: int, lift: bool
    ) -> torch.Tensor:
        """Candidate intervals of every node, as one (6, G, C) int64 table of ``feature``, ``g_low``, ``g_high``,
        ``hits``, ``support`` and ``valid`` (0/1) per node and candidate: the kappas of the objectives for all
        features, the other kappas of :data:`KAPPAS` only for each node's ``beam_width + 1`` features of highest
        fitness (a candidate never has a higher fitness than its feature's kappa-0.5 interval, so the others could
        not make a node's top ``beam_width``). Features a node already uses are not valid."""
        fine = self.fine
        device = tot.device
        n_feat, g = len(fine.columns), len(beam)
        main = self.objectives[-1].kappas(False)  # 0.5 first
        if lift:  # the base rate's intervals of every feature: candidates for the nodes of high lift
            main = main + tuple(kp for kp in self.lift.kappas() if kp not in main)
        rest = tuple(kp for kp in self.kappas if kp not in main)
        every = torch.arange(n_feat, device=device).repeat(g)
        b = self._dense_every(tot, tgt, every, g, min_support, main)  # (G * F, Km)
        used = [k * n_feat + j for k, parent in enumerate(beam) for j, _, _ in parent.conds]
        free = torch.ones(g * n_feat, dtype=torch.bool, device=device)
        if used:
            free[tensor_on(used, device=device)] = False

        def table(feat: torch.Tensor, d: DenseBest, ok: torch.Tensor) -> torch.Tensor:  # (6, G, rows x kappas)
            n_k = d.valid.shape[1]
            fields = [feat[:, None].expand(-1, n_k), d.g_low, d.g_high, d.hits, d.support, d.valid & ok[:, None]]
            return torch.stack([f.long() for f in fields]).view(6, g, -1)

        parts = [table(every, b, free)]
        if rest:
            top = self.beam_width + 1
            if n_feat > top:
                fit = (fitness_value(b.hits[:, 0], b.support[:, 0])).double()
                score = torch.where(b.valid[:, 0] & free, fit, torch.full_like(fit, -math.inf))
                order = torch.sort(score.view(g, n_feat), dim=1, descending=True, stable=True).indices[:, :top]
                sel = (torch.arange(g, device=device)[:, None] * n_feat + order).reshape(-1)
            else:
                sel = torch.arange(g * n_feat, device=device)
            b2 = self._dense(tot[sel], tgt[sel], every[sel], min_support, rest)  # (G * top, Kr)
            parts.append(table(every[sel], b2, free[sel]))
        return torch.cat(parts, 2)

    def _expand(
        self, beam: list[State], both: torch.Tensor, min_support: int, seen: set, chooser: list
    ) -> tuple[dict[tuple, State], dict[tuple, State]]:
        """The best children of every node of the beam (``both``: its :meth:`_node_counts`): per ``(objective,
        width)`` of ``chooser``, ``width`` per node, skipping (for the first objective) children already found; the
        children of the objectives, then those only :class:`Lift` chose (taken after every node's others: the
        objectives' children do not depend on whether ``chooser`` holds the lift, nor does the candidate table).

        Each node's candidates are sorted per objective on the device by (key, hits, -feature, -g_low, then the
        candidates' order), and the first ``M`` of each cross to the host in one ``tolist``; ``M`` = (``width`` + 2)
        x the number of kappas. Skipped candidates are the same interval from another kappa (at most one per kappa
        for each child taken) or a child of another node; should a node run out of fetched candidates before it has
        ``width`` children, its whole ordering is fetched (a second sync, rare)."""
        fine = self.fine
        n_feat, g = len(fine.columns), len(beam)
        tgt = both[g:].view(g * n_feat, self.width)
        tot = both[:g].view(g * n_feat, self.width).add_(tgt)  # in place: no third table
        fields = self._candidates(beam, tot, tgt, min_support, True)
        feature, g_low, _, hits, support, valid = fields.unbind(0)
        n_cols = fields.shape[2]
        n_k = len(self.kappas) + 1
        tail = [(hits, 0, self.n_rows), (-feature, 1 - n_feat, 0), (-g_low, 1 - self.width, 0)]
        m = min(n_cols, fetch_length(max(width for _, width in chooser), n_k))
        orders, fetched = [], []
        for obj, _ in chooser:
            keys = [(valid, 0, 1)] + obj.tensor_key(hits, support, self.n_rows) + tail
            order = _descending_order(packed_keys(keys))
            orders.append(order)
            fetched.append(fields.gather(2, order[None, :, :m].expand(6, -1, -1)))
        lists = torch.stack(fetched).tolist()  # (objectives, 6, G, M): the one host sync of the expansion
        children: dict[tuple, State] = {}
        phases = [
            [o for o, (obj, _) in enumerate(chooser) if obj is not self.lift],
            [o for o, (obj, _) in enumerate(chooser) if obj is self.lift],
        ]
        for n_phase, phase in enumerate(phases):
            if n_phase:
                objective_children = dict(children)
            for k, parent in enumerate(beam):
                for o in phase:
                    width = chooser[o][1]
                    f, lo, hi, h, n, ok = lists[o]
                    entries = zip(f[k], lo[k], hi[k], h[k], n[k], ok[k])
                    taken = self._take(children, parent, entries, width, seen, o == 0)
                    if taken < width and len(f[k]) < n_cols and ok[k][-1]:  # ran out of fetched candidates
                        whole = fields[:, k].gather(1, orders[o][k][None].expand(6, -1)).tolist()
                        self._take(children, parent, zip(*whole), width, seen, o == 0, skip=len(f[k]), done=taken)
        return objective_children, {c: st for c, st in children.items() if c not in objective_children}

    @staticmethod
    def _take(
        children: dict, parent: State, entries, width: int, seen: set, first: bool, skip: int = 0, done: int = 0
    ) -> int:
        """Add to ``children`` the node's next children from its sorted candidates ``entries`` (the first ``skip``
        already walked, ``done`` taken) until ``width`` are taken; returns how many were taken."""
        taken = done
        for i, (f, lo, hi, h, n, ok) in enumerate(entries):
            if i < skip:
                continue
            if taken == width or not ok:
                break
            conds = tuple(sorted(parent.conds + ((f, lo, hi),)))
            if conds in seen or (conds in children and first):
                continue  # the same interval from another kappa or another parent
            taken += 1
            if conds not in children:
                children[conds] = State(conds, h, n)
        return taken

    def run(
        self, *, max_length: int, min_support: int, progress: bool = False, seeds: list[tuple[tuple, ...]] = ()
    ) -> list[State]:
        """The rule sets of :meth:`run_by_length`, once each."""
        out: dict[tuple, State] = {}
        for _, state in self.run_by_length(
            max_length=max_length, min_support=min_support, progress=progress, seeds=seeds
        ):
            out.setdefault(state.conds, state)
        return list(out.values())

    def run_by_length(
        self, *, max_length: int, min_support: int, progress: bool = False, seeds: list[tuple[tuple, ...]] = ()
    ) -> list[tuple[int, State]]:
        """The best rule sets of every length (``beam_width`` per objective), each with the length at which the beam
        chose it, unsorted, without those that a rule set with one condition fewer matches or beats in both fitness
        and confidence (a condition that adds nothing).

        Every length is searched the same way whatever ``max_length``, so a search at a shorter ``max_length``
        returns exactly this one's rule sets chosen at lengths up to its own (what makes the beam strategy monotone
        in ``max_length``). ``seeds``: pairs of conditions (fine grids) expanded at the second length, unless the beam
        already holds a node on one of their features (its expansion covers the pair); their children count among
        that length's best but do not go on to the third (seeded pairs crowd a longer search's beam)."""
        bar = progress_bar(progress, total=max_length, desc="beam search lengths", unit="length")
        beam = [State((), self.n_target, self.n_rows)]
        both = self._root_counts()
        found: dict[tuple, State] = {}  # every rule set visited
        best: dict[tuple, tuple[int, State]] = {}  # the best of each length and objective, with that length
        chooser = [
            (obj, self.beam_width if i == 0 else max(1, self.beam_width // 2)) for i, obj in enumerate(self.objectives)
        ]
        seed_beam: list[State] = []
        for length in range(1, max_length + 1):
            # before the last length, a few children of high lift too (see :class:`Lift`): for the next beam only
            lift = [(self.lift, max(1, self.beam_width // 2))] if length < max_length else []
            children, lifted = self._expand(beam, both, min_support, set(found), chooser + lift)
            seeded = self._expand_seeds(seed_beam, min_support, found, children, chooser)
            if not children and not seeded and not lifted:
                break
            for state in itertools.chain(children.values(), seeded.values(), lifted.values()):
                found.setdefault(state.conds, state)
            # every child is refined before the beam is chosen: a refined rule set can overtake its siblings
            chosen = self._choose(children, seeded, found, best, length, min_support)
            bar.update(1)
            if length == max_length:
                break
            beam = self._next_beam(chosen, found, length)
            if not beam:
                break
            both = self._node_counts([s.conds for s in beam])
            seed_beam = _seed_beam(seeds, chosen) if length == 1 else []  # seed pairs after the first length
        bar.close()
        lengths = {conds: length for conds, (length, _) in best.items()}
        states = self._without_idle_conditions({conds: st for conds, (_, st) in best.items()}, found, lengths)
        return states

    def _expand_seeds(
        self,
        seed_beam: list[State],
        min_support: int,
        found: dict[tuple, State],
        children: dict[tuple, State],
        chooser: list,
    ) -> dict[tuple, State]:
        """The children of the seed pairs' conditions (none when there are none), beside the beam's."""
        if not seed_beam:
            return {}
        nodes = [st.conds for st in seed_beam]
        both = self._node_counts(nodes) if self.all_rows is None else self.all_rows.seed_counts(nodes, self)
        seeded, _ = self._expand(seed_beam, both, min_support, set(found) | set(children), chooser)
        return seeded

    def _choose(
        self,
        children: dict[tuple, State],
        seeded: dict[tuple, State],
        found: dict[tuple, State],
        best: dict[tuple, tuple[int, State]],
        length: int,
        min_support: int,
    ) -> dict[tuple, State]:
        """The beam's next nodes of one length: per objective the best children (and seeded children) refined,
        ranked, the best ``beam_width`` kept; ``found`` and ``best`` updated in place."""
        chosen: dict[tuple, State] = {}
        for obj in self.objectives:
            # children on the same features tend to climb to the same optimum: refine the best of each set
            firsts = [_first_per_features(pool, obj) for pool in (children, seeded)]
            done = self._refine(firsts[0] + firsts[1], min_support, obj)
            for pool, tops, goes_on in (
                (children, done[: len(firsts[0])], True),
                ({**children, **seeded}, done, False),
            ):
                refined: dict[tuple, State] = dict(pool)
                for state in tops:
                    refined.setdefault(state.conds, state)
                    found.setdefault(state.conds, state)
                ranked = sorted(refined.values(), key=lambda s: s.conds)  # ties: the smaller conditions first
                ranked.sort(key=lambda s: obj.key(s.hits, s.support), reverse=True)
                for state in ranked[: self.beam_width]:
                    if goes_on:
                        chosen.setdefault(state.conds, state)
                    best.setdefault(state.conds, (length, state))
                if not seeded:
                    break  # the same pool: ranked once
        return chosen

    def _next_beam(self, chosen: dict[tuple, State], found: dict[tuple, State], length: int) -> list[State]:
        """The next beam: ``chosen`` and a few rule sets of ``length`` of high lift (added to ``chosen``)."""
        level = sorted((st for st in found.values() if len(st.conds) == length), key=lambda s: s.conds)
        level.sort(key=lambda s: self.lift.key(s.hits, s.support), reverse=True)
        for state in level[: max(1, self.beam_width // 2)]:
            chosen.setdefault(state.conds, state)
        return list(chosen.values())

    def _without_idle_conditions(
        self, best: dict[tuple, State], found: dict[tuple, State], lengths: dict[tuple, int]
    ) -> list[tuple[int, State]]:
        """``best``'s rule sets, each replaced by its rule set with one condition fewer while that one has at least its
        fitness and confidence (exact integer comparisons; the sub-rule sets the search did not visit are counted
        first, all in one batched pass); each with the length of ``lengths`` at which its rule set was chosen (once
        per length)."""
        todo = {
            sub
            for state in best.values()
            for r in range(1, len(state.conds))
            for sub in itertools.combinations(state.conds, r)
            if sub not in found
        }
        if todo:
            todo = sorted(todo)
            per = max(1, _MASK_BYTES // (4 * max(1, self.codes_t.shape[1])))  # rule sets masked at once
            parts = []
            for i in range(0, len(todo), per):
                masks = self._node_masks(todo[i : i + per])
                parts.append(torch.stack([count_true(masks & self.target), count_true(masks)]))
            both = D.all_reduce_sum(parts[0] if len(parts) == 1 else torch.cat(parts, 1))
            for conds, h, n in zip(todo, *both.tolist()):
                found[conds] = State(conds, h, n)
        out: dict[tuple, tuple[int, State]] = {}
        for key, state in best.items():
            changed = True
            while changed and len(state.conds) > 1:
                changed = False
                for k in range(len(state.conds)):
                    sub = found[state.conds[:k] + state.conds[k + 1 :]]
                    if (
                        fitness_value(sub.hits, sub.support) >= fitness_value(state.hits, state.support)
                        and sub.hits * state.support >= state.hits * sub.support
                    ):
                        state, changed = sub, True
                        break
            out.setdefault((lengths[key], state.conds), (lengths[key], state))
        return list(out.values())
