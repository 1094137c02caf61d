"""Seeded toy layers and models with planted concepts, for the tests of concept bases (tests/concepts/)."""

from __future__ import annotations

import torch
from torch import nn


def planted_features(
    n: int = 3000, d: int = 64, k: int = 32, active: int = 3, noise: float = 0.01, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A layer built from K planted features: (activations (n, d), features (k, d) of unit length, coefficients
    (n, k)); each row is a non-negative combination of ``active`` features drawn at random (coefficients in
    [0.5, 1.5)) plus Gaussian noise of standard deviation ``noise``."""
    g = torch.Generator().manual_seed(seed)
    features = torch.randn(k, d, generator=g)
    features = features / features.norm(dim=1, keepdim=True)
    chosen = torch.rand(n, k, generator=g).argsort(dim=1)[:, :active]
    coefficients = torch.zeros(n, k).scatter(1, chosen, torch.rand(n, active, generator=g) + 0.5)
    return coefficients @ features + noise * torch.randn(n, d, generator=g), features, coefficients


def stroke_images(
    n: int, *, top: bool | None = None, left: bool | None = None, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``n`` 8 x 8 one-channel images of dim noise (uniform in [0, 0.3)), with two planted concepts: a bright
    horizontal stroke on top (row 0, columns 2-7) and a bright vertical stroke on the left (column 0, rows 2-7).
    ``top`` / ``left``: every image has (True) or lacks (False) the stroke; ``None``: each image by a fair coin.
    Returns (images (n, 1, 8, 8), has_top (n,), has_left (n,))."""
    g = torch.Generator().manual_seed(seed)
    images = 0.3 * torch.rand(n, 1, 8, 8, generator=g)
    coins = torch.rand(n, 2, generator=g) < 0.5
    has_top = coins[:, 0] if top is None else torch.full((n,), top)
    has_left = coins[:, 1] if left is None else torch.full((n,), left)
    images[has_top, 0, 0, 2:] = 1.0
    images[has_left, 0, 2:, 0] = 1.0
    return images, has_top, has_left


class StrokeModel(nn.Module):
    """Classifies 8 x 8 images by the top stroke only, built by construction (seeded).

    ``detect`` (Linear 64 -> 8, then ReLU): unit 0 fires on the top stroke, unit 1 on the left stroke, units 2-7
    read random pixels; ``hidden`` (Linear 8 -> 8, the explained layer): a random rotation ``Q`` of the detectors,
    so each concept spreads over all its units; ``head`` (Linear 8 -> 2): class 1 iff ``(Q^T h)_0``, the top stroke
    detector, exceeds 0.25. The top stroke's direction in ``hidden`` is ``Q[:, 0]``, the left stroke's ``Q[:, 1]``.
    """

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.flatten = nn.Flatten()
        self.detect = nn.Linear(64, 8)
        self.relu = nn.ReLU()
        self.hidden = nn.Linear(8, 8, bias=False)
        self.head = nn.Linear(8, 2)
        top, left = torch.zeros(8, 8), torch.zeros(8, 8)
        top[0, 2:], left[2:, 0] = 1 / 6, 1 / 6
        detectors = 0.1 * torch.randn(8, 64, generator=g)
        detectors[0], detectors[1] = top.flatten(), left.flatten()
        Q, _ = torch.linalg.qr(torch.randn(8, 8, generator=g))
        with torch.no_grad():
            self.detect.weight.copy_(detectors)
            self.detect.bias.copy_(torch.tensor([-0.3, -0.3, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2]))
            self.hidden.weight.copy_(Q)
            self.head.weight.zero_()
            self.head.weight[1] = 4 * Q[:, 0]
            self.head.bias.copy_(torch.tensor([0.0, -1.0]))
        self.Q = Q

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.hidden(self.relu(self.detect(self.flatten(x)))))


class TinySAE(nn.Module):
    """A tiny sparse autoencoder with ``encode`` and ``decode``, built without arguments (seeded): saved and loaded
    by its import path ``concept_models.TinySAE``."""

    def __init__(self, d: int = 6, k: int = 4) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(d * 100 + k)
        self.enc = nn.Linear(d, k)
        self.dec = nn.Linear(k, d)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g))
        self.register_buffer("steps", torch.tensor(0))

    def encode(self, a: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.enc(a))

    def decode(self, c: torch.Tensor) -> torch.Tensor:
        return self.dec(c)


class SizedSAE(TinySAE):
    """:class:`TinySAE` whose constructor needs its sizes: loaded with ``modules={path: instance}``."""

    def __init__(self, d: int, k: int) -> None:
        super().__init__(d, k)


class StrokeSAE(TinySAE):
    """:class:`TinySAE` over the 8 units of :class:`StrokeModel`'s ``hidden`` layer, with 4 features, built without
    arguments (seeded): saved and loaded by its import path ``concept_models.StrokeSAE``."""

    def __init__(self, d: int = 8, k: int = 4) -> None:
        super().__init__(d, k)
