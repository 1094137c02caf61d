"""Helpers of the Lightning callback's arguments: a target's description, the refusal of two callbacks with one name."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np


def _describe_target(target: Any) -> str:
    """A short, stable description of ``target`` for the callback's ``state_key`` and default file name."""
    if isinstance(target, (bool, int, float, str, np.integer, np.floating)) or target is None:
        return repr(target)
    if isinstance(target, tuple):
        return repr(tuple(float(v) if v is not None else None for v in target))
    if callable(target):
        return getattr(target, "__qualname__", type(target).__name__)
    return f"mask[{len(target)}]" if hasattr(target, "__len__") else type(target).__name__


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.+-]+", "-", text).strip("-") or "x"


def _same_names(extractor: Any) -> str:
    return (
        "Expected distinct `filename`s (and `log_prefix`es) for the RegionalRuleExtractors of one trainer, but two "
        f"write {extractor.filename!r} (prefix {extractor.log_prefix!r}; default names coincide for the same target, "
        "layer and data); pass filename=... (and log_prefix=...) to one of them."
    )


def _refuse_a_seen_key(extractor: Any, key: str, caller: Any) -> None:
    """Refuse a ``state_key`` that Lightning's check of the callback list (the ``caller``) has seen already, with a
    message that names the options to pass (Lightning's names none)."""
    if caller.f_code.co_name != "_validate_callbacks_list":
        return
    seen = caller.f_locals.get("seen_callbacks")
    if isinstance(seen, set) and key in seen:
        raise ValueError(_same_names(extractor))


def _first_loader(loader: Any) -> Any:
    if isinstance(loader, (list, tuple)):
        return loader[0] if loader else None
    if isinstance(loader, Mapping):
        return next(iter(loader.values()), None)
    return loader


def _is_indices(features: Any) -> bool:
    """Whether a callback's ``features`` is a feature subset (indices or a ``FeatureSelection``), not a matrix."""
    return not (hasattr(features, "iloc") or (getattr(features, "ndim", 1) == 2 and not hasattr(features, "features")))
