"""Type aliases and constants shared by the public signatures."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Union

import numpy as np
import torch

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    ArrayLike = Union[torch.Tensor, np.ndarray, pd.DataFrame]
else:
    ArrayLike = Union[torch.Tensor, np.ndarray, Any]

#: Boolean subgroup indicator of shape (N,).
MaskLike = Union[torch.Tensor, np.ndarray]

#: Feature kinds understood by the rule search.
FEATURE_TYPES = ("float", "int", "cat")

#: Binning strategies for the initial value grids.
BIN_STRATEGIES = ("uniform", "quantile", "kmeans")
