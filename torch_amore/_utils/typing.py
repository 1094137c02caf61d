"""Type aliases and constants shared by the public signatures."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

#: Feature matrices: a torch tensor, a numpy array or a pandas DataFrame (N, F).
ArrayLike = torch.Tensor | np.ndarray | Any

#: Boolean subgroup indicator of shape (N,).
MaskLike = torch.Tensor | np.ndarray

#: Feature kinds understood by the rule search.
FEATURE_TYPES = ("float", "int", "cat")

#: Binning strategies for the initial value grids.
BIN_STRATEGIES = ("uniform", "quantile", "kmeans")

#: How to find the model input / the labels in a batch: an index or key, several of them, or a callable on the batch.
BatchKey = int | str | Sequence[int | str] | Callable[[Any], Any] | None
