"""The paper's rule tree (Algorithms 2 and 3), grown one level at a time.

Every node of a level is counted in one pass over the grid codes of the rows it covers
(:func:`torch_amore.ratios.node_grid_counts`), the candidate intervals of all (node, feature) pairs come from one
batched :func:`torch_amore.intervals.candidate_intervals` call, each node's ``top_k`` candidates are chosen by sorts on
the device (highest ratio, then larger support, then lower feature index and grids), and the rows of all children
are selected at once. Per level only the chosen candidates (a few numbers each) cross to the host.

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
from torch_amore.intervals import Candidates, candidate_intervals
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


def _ranked(c: Candidates, node: torch.Tensor, feature: torch.Tensor) -> torch.Tensor:
    """Permutation sorting candidates by node, then highest ratio, larger support, lower feature, g_low, g_high."""
    perm = torch.arange(len(c), device=node.device)
    for key in (c.g_high, c.g_low, feature, -c.support, -c.ratio, node):  # least significant first, stable sorts
        perm = perm[torch.sort(key[perm], stable=True).indices]
    return perm


def _top_k(c: Candidates, n_nodes: int, n_features: int, top_k: int) -> tuple[torch.Tensor, ...]:
    """The ``top_k`` best candidates of each node: (node, feature, g_low, g_high, hits, support, rank, ratio)."""
    node, feature = c.feature // n_features, c.feature % n_features
    perm = _ranked(c, node, feature)
    node_sorted = node[perm]
    per_node = torch.bincount(node_sorted, minlength=n_nodes)
    rank = torch.arange(len(c), device=node.device) - (torch.cumsum(per_node, 0) - per_node)[node_sorted]
    best = torch.nonzero(rank < top_k, as_tuple=True)[0]
    sel = perm[best]
    return node[sel], feature[sel], c.g_low[sel], c.g_high[sel], c.hits[sel], c.support[sel], rank[best], c.ratio[sel]


def _children_rows(
    codes: torch.Tensor, rows: torch.Tensor, sizes: torch.Tensor, chosen: tuple[torch.Tensor, ...], total: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of every chosen candidate's child (its node's rows inside the interval), grouped by child, in one pass."""
    node, feature, g_low, g_high = chosen[:4]
    starts = torch.cumsum(sizes, 0) - sizes  # rows are grouped by node
    child_sizes = sizes[node]
    child = torch.repeat_interleave(torch.arange(node.numel(), device=rows.device), child_sizes, output_size=total)
    first = torch.cumsum(child_sizes, 0) - child_sizes
    entry = (starts[node] - first)[child] + torch.arange(total, device=rows.device)
    r = rows[entry]
    code = codes[r, feature[child]]
    inside = torch.nonzero((code >= g_low[child]) & (code <= g_high[child]), as_tuple=True)[0]
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
    local = None if local_codes is None else torch.tensor(local_codes, device=device)
    rows = torch.arange(codes.shape[0], device=device)
    nodes = torch.zeros_like(rows)
    paths: list[tuple[int, ...]] = [()]
    node_steps: list[tuple] = [()]
    out: list[TreeCandidate] = []
    bar = progress_bar(progress, desc="rule tree nodes", unit="node")
    for depth in range(max_length):
        n_nodes = len(paths)
        if n_nodes == 0:
            break
        sizes = torch.bincount(nodes, minlength=n_nodes)
        if depth == 0:
            tot, tgt = root_counts[0][None], root_counts[1][None]
            n_node = torch.tensor([D.global_count(codes.shape[0])], device=device)
            t_node = torch.tensor([n_total_target], device=device)
        else:
            is_t = torch.nonzero(target[rows], as_tuple=True)[0]
            tot = node_grid_counts(codes, rows, nodes, n_nodes, width)
            tgt = node_grid_counts(codes, rows[is_t], nodes[is_t], n_nodes, width)
            n_node = D.all_reduce_sum(sizes)
            t_node = D.all_reduce_sum(torch.bincount(nodes[is_t], minlength=n_nodes))
        allowed = torch.ones(n_nodes, n_feat, dtype=torch.bool)
        for i, steps in enumerate(node_steps):
            allowed[i, [s[0] for s in steps]] = False
        allowed = allowed.to(device) & ((t_node > 0) & (t_node < n_node))[:, None]  # nothing to find otherwise
        cands = candidate_intervals(
            tot.reshape(n_nodes * n_feat, -1), tgt.reshape(n_nodes * n_feat, -1), binned.n_bins.repeat(n_nodes),
            binned.is_cat.repeat(n_nodes), allowed.reshape(-1), min_support, t_node.repeat_interleave(n_feat),
            n_node.repeat_interleave(n_feat), local_codes=None if local is None else local.repeat(n_nodes),
        )  # fmt: skip
        chosen = _top_k(cands, n_nodes, n_feat, top_k)
        expand = depth + 1 < max_length
        child_sizes = sizes[chosen[0]] if expand else torch.zeros_like(chosen[0])
        host = torch.stack([t.to(torch.float64) for t in chosen[:7] + (child_sizes,)]).T.tolist()  # one transfer
        ratios = chosen[7].tolist()
        new_paths, new_steps = [], []
        for (node, j, lo, hi, hits, support, rank, _), ratio in zip(host, ratios):
            node, rank = int(node), int(rank)
            steps = node_steps[node] + ((int(j), int(lo), int(hi), ratio),)
            out.append(TreeCandidate(paths[node], rank, steps, int(hits), int(support)))
            new_paths.append(paths[node] + (rank,))
            new_steps.append(steps)
        bar.update(n_nodes)
        if not expand:
            break
        total = int(sum(row[7] for row in host))
        rows, nodes = _children_rows(codes, rows, sizes, chosen, total)
        paths, node_steps = new_paths, new_steps
    bar.close()
    return out
