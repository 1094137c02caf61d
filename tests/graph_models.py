"""A small seeded graph classifier for the explainer's graph tests (torch_geometric, the ``graph`` extra)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class GCN(nn.Module):
    """A seeded graph classifier: one GCN layer, mean pooling, a hidden head (the explained layer), two classes."""

    def __init__(self) -> None:
        super().__init__()
        from torch_geometric.nn import GCNConv

        torch.manual_seed(0)
        self.conv = GCNConv(3, 8)
        self.head = nn.Linear(8, 4)
        self.out = nn.Linear(4, 2)

    def forward(self, data: Any) -> torch.Tensor:
        from torch_geometric.nn import global_mean_pool

        h = torch.relu(self.conv(data.x, data.edge_index))
        return self.out(torch.relu(self.head(global_mean_pool(h, data.batch))))
