"""Original units of scaled features: the affine map ``raw = x * scale + offset`` of a fitted scikit-learn scaler."""

from __future__ import annotations

from typing import Any

import numpy as np

from torch_amore.search.options import SearchOptions


def scaler_units(scaler: Any, n_features: int) -> tuple[list[float], list[float]]:
    """``(scale, offset)`` per feature such that ``raw = x * scale + offset`` inverts a fitted per-feature affine
    scaler (``StandardScaler``, ``MinMaxScaler``, ``RobustScaler``, ``MaxAbsScaler`` or a pipeline of them), read
    off ``scaler.inverse_transform`` at 0, 1 and 2 (the third point checks that it is affine).

    Example:
        >>> from sklearn.preprocessing import StandardScaler
        >>> scaler = StandardScaler().fit([[20.0, 0.0], [80.0, 1.0]])
        >>> scaler_units(scaler, 2)
        ([30.0, 0.5], [50.0, 0.5])
    """
    inverse = getattr(scaler, "inverse_transform", None)
    if not callable(inverse):
        raise TypeError(
            "Expected `scaler` to be a fitted scikit-learn scaler with inverse_transform (e.g. StandardScaler, "
            f"MinMaxScaler), but got {type(scaler).__name__}."
        )
    if type(scaler).__name__ == "StandardScaler" and getattr(scaler, "n_features_in_", None) == n_features:
        scale = scaler.scale_ if scaler.with_std else np.ones(n_features)  # exactly the fitted parameters
        offset = scaler.mean_ if scaler.with_mean else np.zeros(n_features)
        return [float(v) for v in scale], [float(v) for v in offset]
    points = np.zeros((3, n_features))
    points[1], points[2] = 1.0, 2.0
    try:
        raw = np.asarray(inverse(points), dtype=np.float64)
    except Exception as err:  # not fitted, or fitted on another number of columns
        raise ValueError(
            f"Expected `scaler` to be fitted on the {n_features} features the rules are built on, but its "
            f"inverse_transform failed: {err}"
        ) from err
    if raw.shape != (3, n_features):
        raise ValueError(f"Expected `scaler` to map {n_features} features, but it returned shape {raw.shape}.")
    offset, scale = raw[0], raw[1] - raw[0]
    if not np.allclose(raw[2] - raw[0], 2 * scale, rtol=1e-6, atol=1e-9) or not np.all(np.isfinite(raw)):
        raise ValueError("Expected `scaler` to be affine per feature (x * scale + offset), but it is not.")
    if np.any(scale == 0):
        bad = np.flatnonzero(scale == 0).tolist()
        raise ValueError(f"Expected `scaler` to have non-zero scales, but features {bad} do not.")
    return [float(v) for v in scale], [float(v) for v in offset]


def with_units(options: SearchOptions, scaler: Any, n_features: int, source: str) -> SearchOptions:
    """``options`` with the scale and offset of a fitted ``scaler`` (rules then print in its original units)."""
    if scaler is None:
        return options
    if options.feature_scale is not None or options.feature_offset is not None:
        raise ValueError("Expected either `scaler` or `feature_scale`/`feature_offset`, not both.")
    if source == "layer":
        raise ValueError("Expected `scaler` only for rules on the inputs or a `features` matrix, not on a layer.")
    scale, offset = scaler_units(scaler, n_features)
    return options.replace(feature_scale=scale, feature_offset=offset)
