"""A small concept basis fitted on data, shared by the tests of rules over concepts (the explainer, the callback)."""

from __future__ import annotations

import torch

from torch_amore.concepts import ConceptBasis


class TopDirections(ConceptBasis):
    """A small basis fitted on data: the top-k right singular vectors of the centered activations."""

    kind = "top-directions"

    def __init__(self, k: int) -> None:
        super().__init__()
        self.k, self.W, self.center, self.fitted_on = k, None, None, None

    @property
    def n_concepts(self) -> int:
        return self.k

    @property
    def fitted(self) -> bool:
        return self.W is not None

    def fit(self, activations, *, progress=False):
        self.fitted_on = activations.shape[0]
        self.center = activations.mean(0)
        self.W = torch.linalg.svd(activations - self.center, full_matrices=False).Vh[: self.k].T
        self.reconstruction_error = {"fvu": 0.5, "mse": 0.25}
        return self

    def encode(self, activations):
        return (activations - self.center) @ self.W

    def decode(self, concepts):
        return concepts @ self.W.T + self.center
