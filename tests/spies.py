"""Spies on the functions that convert the data and resolve a search's plan (issue 38, criterion 2): how often each
ran during a call, through every torch_amore module that holds it."""

from __future__ import annotations

import sys
from collections import Counter

import pytest

from torch_amore.data import arguments as A
from torch_amore.data import validation as V
from torch_amore.search import extractor as E
from torch_amore.search import options as O

#: what is computed once, and the function that computes it
SPIED = {
    "conversion": (V, "to_tensor_2d"),
    "min_support": (A, "resolve_min_support"),
    "auto_min_support": (O, "auto_min_support"),
    "max_length": (E, "capped_max_length"),
    "alignment": (V, "align_rows"),
    "features": (A, "resolve_features"),
}


class Spies:
    """Counts the calls of each spied function, through every torch_amore module that holds it."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: Counter = Counter()
        for key, (module, name) in SPIED.items():
            original = getattr(module, name)

            def spy(*args, _original=original, _key=key, **kwargs):
                self.calls[_key] += 1
                return _original(*args, **kwargs)

            for mod in list(sys.modules.values()):
                if getattr(mod, "__name__", "").startswith("torch_amore") and getattr(mod, name, None) is original:
                    monkeypatch.setattr(mod, name, spy)

    def count(self) -> dict[str, int]:
        calls = {key: self.calls[key] for key in SPIED}
        # the min_support count is one of the two: a given one resolved, or the default from the subgroup
        calls["min_support"] = calls.pop("min_support", 0) + calls.pop("auto_min_support", 0)
        return calls
