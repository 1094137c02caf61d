"""The paper's rule tree (Algorithms 2 and 3), grown one level at a time.

Every node of a level is counted in one pass over the grid codes of the rows it covers
(:func:`torch_amore.ratios.node_grid_counts`, the target samples counted in the same pass), the candidate intervals
of all (node, feature) pairs come from one batched :func:`torch_amore.intervals.candidate_table` call in fixed-shape
slots, each node's ``top_k`` candidates are chosen by sorts on the device (highest ratio, then larger support, then
lower feature index and grids), and the rows of all children are selected at once. A level waits on the device
twice: once to fetch the chosen candidates (a few numbers each, one transfer) and once to select the children's rows.

The result is the node-by-node, depth-first tree of the paper: :func:`insertion_order` sorts the chosen candidates
into the order in which a depth-first walk meets them (best child first), so that a rule set reached along two paths
is reported as the walk first found it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from torch_amore import distributed as D
from torch_amore._progress import progress_bar
from torch_amore.binning import Binned
from torch_amore.intervals import CandidateTable, candidate_table
from torch_amore.ratios import node_grid_counts


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
    """The nodes of one level: their rows (grouped by node), per-grid counts and sample counts."""

    rows: torch.Tensor  # this process's rows of every node, node after node
    sizes: torch.Tensor  # (n,) this process's rows per node
    tot: torch.Tensor  # (n, F, B) per-grid counts of all samples (all ranks)
    tgt: torch.Tensor  # (n, F, B) of the target samples
    n_node: torch.Tensor  # (n,) samples per node (all ranks)
    t_node: torch.Tensor  # (n,) target samples per node (all ranks)


def _count_level(binned: Binned, target: torch.Tensor, rows: torch.Tensor, nodes: torch.Tensor, n_nodes: int) -> _Level:
    """Counts of every node of a level in one pass: each node's target and other samples are two groups."""
    groups = nodes * 2 + target[rows]
    n_feat, width = binned.codes.shape[1], binned.n_bins_max
    counts = node_grid_counts(binned.codes, rows, groups, 2 * n_nodes, width).view(n_nodes, 2, n_feat, width)
    local = torch.bincount(groups, minlength=2 * n_nodes).view(n_nodes, 2)
    total = D.all_reduce_sum(local)
    tgt = counts[:, 1]
    return _Level(rows, local.sum(1), counts[:, 0] + tgt, tgt, total.sum(1), total[:, 1])


def _root_level(binned: Binned, root_counts: tuple[torch.Tensor, torch.Tensor], n_total_target: int) -> _Level:
    """The root node: all rows, with the counts the caller made."""
    codes = binned.codes
    rows = torch.arange(codes.shape[0], device=codes.device)
    counts = torch.tensor([[codes.shape[0], D.global_count(codes.shape[0]), n_total_target]], device=codes.device)
    return _Level(rows, counts[:, 0], root_counts[0][None], root_counts[1][None], counts[:, 1], counts[:, 2])


def _top_k(table: CandidateTable, n_nodes: int, width: int, top_k: int) -> dict[str, torch.Tensor]:
    """Each node's ``top_k`` best candidates, (n, k) tensors: highest ratio, then larger support, then lower
    feature, g_low and g_high (exact keys: the features' slots are ranked on the device, one node per row)."""
    n_slots = table.valid.shape[1]

    def per_node(t: torch.Tensor) -> torch.Tensor:
        return t.reshape(n_nodes, -1)

    ratio = per_node(torch.where(table.valid, table.ratio, -torch.inf))
    support = per_node(table.support)
    feature = torch.arange(ratio.shape[1], device=ratio.device) // n_slots
    tie = per_node(feature.view(-1, n_slots) * (width + 1) + table.g_low.view(n_nodes, -1, n_slots))
    tie = tie * (width + 1) + per_node(table.g_high)
    perm = torch.sort(tie, dim=1, stable=True).indices
    for key in (support, ratio):  # more significant keys later, stable sorts (descending)
        perm = perm.gather(1, torch.sort(key.gather(1, perm), dim=1, descending=True, stable=True).indices)
    best = perm[:, : min(top_k, perm.shape[1])]
    out = {"feature": feature[best], "ratio": ratio.gather(1, best)}
    for name in ("g_low", "g_high", "hits", "support"):
        out[name] = per_node(getattr(table, name)).gather(1, best)
    return out


def _children_rows(
    binned: Binned, level: _Level, parent: torch.Tensor, chosen: dict[str, torch.Tensor], total: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of every child (its parent's rows inside the interval), grouped by child, in one pass (one sync)."""
    rows, sizes = level.rows, level.sizes
    starts = torch.cumsum(sizes, 0) - sizes  # rows are grouped by node
    child_sizes = sizes[parent]
    child = torch.repeat_interleave(torch.arange(parent.numel(), device=rows.device), child_sizes, output_size=total)
    first = torch.cumsum(child_sizes, 0) - child_sizes
    r = rows[(starts[parent] - first)[child] + torch.arange(total, device=rows.device)]
    code = binned.codes[r, chosen["feature"][child]]
    inside = torch.nonzero((code >= chosen["g_low"][child]) & (code <= chosen["g_high"][child]), as_tuple=True)[0]
    return r[inside], child[inside]


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

    Example:
        >>> import torch
        >>> from torch_amore.binning import bin_features
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
    local = None if local_codes is None else torch.tensor(local_codes, device=device)
    level = _root_level(binned, root_counts, n_total_target)
    used = torch.zeros(1, 0, dtype=torch.long, device=device)  # the features on each node's path
    paths: list[tuple[int, ...]] = [()]
    node_steps: list[tuple] = [()]
    out: list[TreeCandidate] = []
    bar = progress_bar(progress, desc="rule tree nodes", unit="node")
    for depth in range(max_length):
        n_nodes = len(paths)
        allowed = torch.ones(n_nodes, n_feat, dtype=torch.bool, device=device).scatter_(1, used, False)
        allowed &= ((level.t_node > 0) & (level.t_node < level.n_node))[:, None]  # nothing to find otherwise
        table = candidate_table(
            level.tot.reshape(n_nodes * n_feat, -1), level.tgt.reshape(n_nodes * n_feat, -1),
            binned.n_bins.repeat(n_nodes), binned.is_cat.repeat(n_nodes), allowed.view(-1), min_support,
            level.t_node.repeat_interleave(n_feat), level.n_node.repeat_interleave(n_feat),
            local_codes=None if local is None else local.repeat(n_nodes), numeric_width=min(binned.n_grids, width),
            numeric=False in kinds, categorical=True in kinds,
        )  # fmt: skip
        chosen = _top_k(table, n_nodes, width, top_k)
        k = chosen["feature"].shape[1]
        fields = [chosen[f].to(torch.float64) for f in ("feature", "g_low", "g_high", "hits", "support", "ratio")]
        host = torch.stack(fields + [level.sizes.repeat_interleave(k).view(n_nodes, k).to(torch.float64)], -1)
        new_paths, new_steps, keep, total = [], [], [], 0
        for i, (j, lo, hi, hits, support, ratio, size) in enumerate(host.view(-1, 7).tolist()):  # one transfer
            if ratio == -float("inf"):  # fewer than top_k candidates
                continue
            node, rank = divmod(i, k)
            steps = node_steps[node] + ((int(j), int(lo), int(hi), ratio),)
            out.append(TreeCandidate(paths[node], rank, steps, int(hits), int(support)))
            new_paths.append(paths[node] + (rank,))
            new_steps.append(steps)
            keep.append(i)
            total += int(size)
        bar.update(n_nodes)
        if depth + 1 == max_length or not keep:
            break
        sel = torch.tensor(keep, device=device)
        parent = torch.div(sel, k, rounding_mode="floor")
        chosen = {name: t.view(-1)[sel] for name, t in chosen.items()}
        rows, nodes = _children_rows(binned, level, parent, chosen, total)
        used = torch.cat([used[parent], chosen["feature"][:, None]], 1)
        paths, node_steps = new_paths, new_steps
        level = _count_level(binned, target, rows, nodes, len(paths))
    bar.close()
    return out
