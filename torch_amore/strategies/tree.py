"""The paper's rule tree (Algorithms 2 and 3), grown one level at a time.

Every node of a level is counted in one pass over the grid codes of the rows it covers
(:func:`torch_amore.grids.ratios.node_grid_counts`, the target samples counted in the same pass), the candidate
intervals of all (node, feature) pairs come from one batched :func:`torch_amore.grids.intervals.candidate_table`
call in
fixed-shape
slots, each node's ``top_k`` candidates are chosen by sorts on the device (highest ratio, then larger support, then
lower feature index and grids), and the rows of all children are selected at once. A level waits on the device
twice: once to fetch the chosen candidates (a few numbers each, one transfer) and once to select the children's rows.

The result is the node-by-node, depth-first tree of the paper: :func:`insertion_order` sorts the chosen candidates
into the order in which a depth-first walk meets them (best child first), so that a rule set reached along two paths
is reported as the walk first found it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from torch_amore._utils import counting
from torch_amore._utils import distributed as D
from torch_amore._utils.progress import progress_bar
from torch_amore._utils.transfer import tensor_on
from torch_amore.grids.binning import Binned
from torch_amore.grids.box_counts import box_counts
from torch_amore.grids.intervals import CandidateTable, candidate_table
from torch_amore.grids.ratios import node_grid_counts


@dataclass(frozen=True)
class TreeCandidate:
    """A candidate rule chosen at a node of the rule tree.

    Attributes:
        path: ranks of the candidates leading from the root to the node (the root is ``()``).
        rank: this candidate's rank among its node's ``top_k``.
        steps: ``(searched feature, g_low, g_high, ratio)`` of every rule from the root, this candidate's last.
        hits: target samples satisfying all rules of ``steps``.
        support: samples satisfying all rules of ``steps``.
    """

    path: tuple[int, ...]
    rank: int
    steps: tuple[tuple[int, int, int, float], ...]
    hits: int
    support: int


def insertion_order(candidate: TreeCandidate) -> tuple[int, ...]:
    """Sort key: the order in which a depth-first walk (best candidate first) meets ``candidate``."""
    return candidate.path + (-1, candidate.rank)


@dataclass
class _Level:
    """The nodes of one level: their rows, per-grid counts and sample counts."""

    rows: torch.Tensor | None  # this process's rows of every node (None: counted from the nodes' conditions)
    nodes: torch.Tensor | None  # the node of each entry of ``rows``
    tot: torch.Tensor  # (n, F, B) per-grid counts of all samples (all ranks)
    tgt: torch.Tensor  # (n, F, B) of the target samples
    n_node: torch.Tensor  # (n,) samples per node (all ranks)
    t_node: torch.Tensor  # (n,) target samples per node (all ranks)


def _count_level(binned: Binned, target: torch.Tensor, rows: torch.Tensor, nodes: torch.Tensor, n_nodes: int) -> _Level:
    """Counts of every node of a level in one pass: each node's target and other samples are two groups."""
    groups = nodes * 2 + target[rows]
    n_feat, width = binned.codes.shape[1], binned.n_bins_max
    counts = node_grid_counts(binned.codes, rows, groups, 2 * n_nodes, width).view(n_nodes, 2, n_feat, width)
    total = D.all_reduce_sum(counting.bincount(groups, 2 * n_nodes).view(n_nodes, 2))
    tgt = counts[:, 1]
    return _Level(rows, nodes, counts[:, 0] + tgt, tgt, total.sum(1), total[:, 1])


def _boxed_level(binned: Binned, target: torch.Tensor, node_steps: list[tuple], row_chunk: int) -> _Level:
    """Counts of every node of a level from the nodes' conditions, ``row_chunk`` rows of codes at a time
    (:func:`torch_amore.grids.box_counts.box_counts`): no rows are kept."""
    boxes = [[step[:3] for step in steps] for steps in node_steps]
    counts, sizes = box_counts(binned.codes, target, boxes, binned.n_bins_max, row_chunk)
    tgt = counts[:, 1]
    return _Level(None, None, counts[:, 0] + tgt, tgt, sizes.sum(1), sizes[:, 1])


def _root_level(
    binned: Binned, root_counts: tuple[torch.Tensor, torch.Tensor], n_total_target: int, keep_rows: bool
) -> _Level:
    """The root node: all rows (``keep_rows``: as a row list), with the counts the caller made."""
    codes = binned.codes
    rows = torch.arange(codes.shape[0], device=codes.device) if keep_rows else None
    nodes = None if rows is None else torch.zeros_like(rows)
    counts = tensor_on([D.global_count(codes.shape[0]), n_total_target], device=codes.device)
    return _Level(rows, nodes, root_counts[0][None], root_counts[1][None], counts[:1], counts[1:])


def _top_k(table: CandidateTable, n_nodes: int, width: int, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each node's ``top_k`` best candidates: highest ratio, then larger support, then lower feature, g_low and
    g_high (exact keys, sorted on the device, one node per row). Returns (n, k, 5) ints (feature, g_low, g_high,
    hits, support) and (n, k) ratios (-inf: no candidate)."""
    n_slots = table.valid.shape[1]
    ints = table.ints.view(n_nodes, -1, 4)
    ratio = torch.where(table.valid, table.ratio, -torch.inf).view(n_nodes, -1)
    slot = torch.arange(ratio.shape[1], device=ratio.device)
    feature = torch.div(slot, n_slots, rounding_mode="floor")
    tie = (feature * (width + 1) + ints[..., 0]) * (width + 1) + ints[..., 1]
    perm = torch.sort(tie, dim=1, stable=True).indices
    for key in (ints[..., 3], ratio):  # more significant keys later, stable sorts (descending)
        perm = perm.gather(1, torch.sort(key.gather(1, perm), dim=1, descending=True, stable=True).indices)
    best = perm[:, :top_k]
    chosen = torch.cat([feature[best].unsqueeze(-1), ints.gather(1, best.unsqueeze(-1).expand(-1, -1, 4))], -1)
    return chosen, ratio.gather(1, best)


def _children(
    binned: Binned, level: _Level, chosen: torch.Tensor, valid: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of every child (its parent's rows inside the interval) in one pass (one sync). Children are numbered
    rank by rank, then node by node (the valid ones)."""
    rows, nodes = level.rows, level.nodes
    codes = binned.codes

    def per_row(t: torch.Tensor) -> torch.Tensor:  # (E, ...): each entry's node's values; one node: broadcast
        return t.expand(len(nodes), *t.shape[1:]) if t.shape[0] == 1 else t.index_select(0, nodes)

    feature = per_row(chosen[..., 0])  # (E, k)
    # the bounds in the codes' dtype: comparisons of mixed dtypes are several times slower
    low, high = per_row(chosen[..., 1:3].to(codes.dtype)).unbind(-1)
    code = codes.reshape(-1).take(rows.unsqueeze(1) * codes.shape[1] + feature)  # (E, k): 2x advanced indexing
    inside = (code >= low) & (code <= high) & per_row(valid)
    rank, entry = torch.nonzero(inside.T, as_tuple=True)
    number = valid.T.reshape(-1).cumsum(0) - 1  # children's numbers, rank by rank
    return rows[entry], number[rank * valid.shape[0] + nodes[entry]]


def grow_tree(
    binned: Binned,
    target: torch.Tensor,
    root_counts: tuple[torch.Tensor, torch.Tensor],
    n_total_target: int,
    *,
    max_length: int,
    min_support: int,
    top_k: int,
    local_codes: list[int] | None = None,
    progress: bool = False,
    row_chunk: int | None = None,
) -> list[TreeCandidate]:
    """Every candidate chosen in the rule tree, level by level (see the module docstring).

    Args:
        binned: the binned features.
        target: (N,) bool subgroup (this process's shard under DDP).
        root_counts: (F, B) per-grid counts of all samples and of the target samples (summed over DDP ranks).
        n_total_target: target samples of all ranks.
        max_length, min_support, top_k: as in :func:`torch_amore.extract_rules`.
        local_codes: the local sample's grid per feature (-1 where missing): only candidates containing it.
        progress: a progress bar over the nodes.
        row_chunk: count each level from its nodes' conditions, this many rows of codes at a time, instead of
            keeping the rows of its nodes (:func:`torch_amore.grids.box_counts.box_counts`; the same counts, in the
            memory of one chunk: for codes on disk); ``None``: keep them.

    Example:
        >>> import torch
        >>> from torch_amore.grids.binning import bin_features
        >>> X = torch.tensor([[0.0], [1.0], [2.0], [3.0]])
        >>> b = bin_features(X, [0], ["float"], n_grids=2)
        >>> target = torch.tensor([False, False, True, True])
        >>> root = (torch.tensor([[2, 2]]), torch.tensor([[0, 2]]))
        >>> [(c.steps[0][:3], c.hits, c.support) for c in grow_tree(b, target, root, 2, max_length=1,
        ...                                                          min_support=1, top_k=3)]
        [((0, 1, 1), 2, 2)]
    """
    codes, n_feat, width = binned.codes, len(binned.columns), binned.n_bins_max
    device = codes.device
    kinds = {k == "cat" for k in binned.kinds}  # host copies, fixed after binning
    local = None if local_codes is None else tensor_on(local_codes, device=device)
    level = _root_level(binned, root_counts, n_total_target, keep_rows=row_chunk is None)
    paths: list[tuple[int, ...]] = [()]
    node_steps: list[tuple] = [()]
    out: list[list[TreeCandidate]] = []
    bar = progress_bar(progress, desc="rule tree nodes", unit="node")
    for depth in range(max_length):
        n_nodes = len(paths)
        # the features on each node's path are used; a node whose samples are all or none target ones offers no
        # candidate (no ratio > 1), so it needs no mask
        allowed = torch.ones(n_nodes, n_feat, dtype=torch.bool, device=device)
        if depth:
            allowed.scatter_(1, tensor_on([[s[0] for s in steps] for steps in node_steps], device=device), False)
        table = candidate_table(
            level.tot.reshape(n_nodes * n_feat, -1),
            level.tgt.reshape(n_nodes * n_feat, -1),
            None,
            binned.is_cat.repeat(n_nodes) if len(kinds) == 2 else None,
            allowed.view(-1),
            min_support,
            level.t_node.repeat_interleave(n_feat),
            level.n_node.repeat_interleave(n_feat),
            local_codes=None if local is None else local.repeat(n_nodes),
            numeric_width=min(binned.n_grids, width),
            numeric=False in kinds,
            categorical=True in kinds,
        )
        chosen, ratio = _top_k(table, n_nodes, width, top_k)
        found: list[TreeCandidate] = []
        children: list[tuple[int, int, TreeCandidate]] = []
        host = torch.cat([chosen.to(torch.float64), ratio.unsqueeze(-1)], -1).tolist()  # the level's one transfer
        for node, node_chosen in enumerate(host):  # counts below 2**53: exact as floats
            for rank, (j, lo, hi, hits, support, r) in enumerate(node_chosen):
                if r == -math.inf:  # fewer than top_k candidates
                    break
                steps = node_steps[node] + ((int(j), int(lo), int(hi), r),)
                found.append(TreeCandidate(paths[node], rank, steps, int(hits), int(support)))
                children.append((rank, node, found[-1]))
        out.append(found)
        bar.update(n_nodes)
        if depth + 1 == max_length or not found:
            break
        children.sort(key=lambda c: c[:2])  # rank by rank, then node by node, as _children numbers them
        paths = [c.path + (c.rank,) for _, _, c in children]
        node_steps = [c.steps for _, _, c in children]
        if row_chunk is None:
            rows, nodes = _children(binned, level, chosen, ratio > -math.inf)
            level = _count_level(binned, target, rows, nodes, len(paths))
        else:
            level = _boxed_level(binned, target, node_steps, row_chunk)
    bar.close()
    return [c for found in out for c in sorted(found, key=insertion_order)]
