"""A literal brute force over every box of grids, shared by the tests of the exact search and of the optimum that
other strategies' results carry."""

from __future__ import annotations

import itertools
import math

import torch


def mixed_data(seed: int, n: int = 240):
    """Float, int, categorical and NaN-holding columns; a target tied to two of them."""
    g = torch.Generator().manual_seed(seed)
    x0 = torch.rand(n, generator=g, dtype=torch.float64)
    x1 = torch.randint(0, 7, (n,), generator=g).double()
    x2 = torch.randint(0, 3, (n,), generator=g).double()  # categorical
    x3 = torch.randn(n, generator=g, dtype=torch.float64)
    x3[torch.rand(n, generator=g) < 0.15] = math.nan
    X = torch.stack([x0, x1, x2, x3], 1)
    noise = torch.rand(n, generator=g) < 0.15
    target = (((x0 > 0.4) & (x1 < 4)) | ((x2 == 1) & (x3.nan_to_num(0) > 0.3))) ^ noise
    return X, target, ["float", "int", "cat", "float"]


def brute_force(binned, target: torch.Tensor, max_length: int, min_support: int, top_k: int):
    """Every box of grids of 1..max_length features with its mask; keep the tight, non-idle, proper ones."""
    codes = binned.codes.long()
    n_feat = codes.shape[1]
    valid = codes < binned.nan_code
    conditions = {}  # feature -> [(a, b, mask)]
    for f in range(n_feat):
        nb = int(binned.n_bins[f])
        spans = [(a, a) for a in range(nb)] if bool(binned.is_cat[f]) else [
            (a, b) for a in range(nb) for b in range(a, nb)]  # fmt: skip
        conds = []
        for a, b in spans:
            mask = valid[:, f] & (codes[:, f] >= a) & (codes[:, f] <= b)
            if bool((valid[:, f] & ~mask).any()):  # a proper condition excludes some non-missing value
                conds.append((a, b, mask))
        conditions[f] = conds
    found = []
    for length in range(1, max_length + 1):
        for feats in itertools.combinations(range(n_feat), length):
            for combo in itertools.product(*(conditions[f] for f in feats)):
                masks = [c[2] for c in combo]
                mask = torch.stack(masks).all(0)
                support = int(mask.sum())
                if support < min_support:
                    continue
                tight = all(
                    bool((mask & (codes[:, f] == a)).any()) and bool((mask & (codes[:, f] == b)).any())
                    for f, (a, b, _) in zip(feats, combo)
                )
                idle = any(
                    int(torch.stack(masks[:i] + masks[i + 1 :]).all(0).sum()) == support
                    for i in range(length)
                    if length > 1
                )
                if not tight or idle:
                    continue
                hits = int((mask & target).sum())
                feat_key = list(feats) + [-1] * (3 - length)
                cut_key = [x for f, (a, b, _) in zip(feats, combo) for x in (a, b)] + [-1] * 2 * (3 - length)
                conds = tuple((f, a, b) for f, (a, b, _) in zip(feats, combo))
                found.append(((-(2 * hits - support), feat_key, cut_key), (hits, support, conds)))
    found.sort(key=lambda x: x[0])
    return [box for _, box in found[:top_k]]
