"""OneWarning: the reasons of one call leave as one UserWarning; inner collectors hand theirs to the outer one; other
packages' warnings and other categories pass through unchanged."""

from __future__ import annotations

import warnings

import pytest

from torch_amore._utils.one_warning import OneWarning


def _inner() -> None:
    with OneWarning() as warned:
        warned.add("inner reason.", "leak")
        warned.add("shared reason.")


def _outer(leave_out: tuple[str, ...] = ()) -> str:
    with OneWarning(leave_out=leave_out) as warned:
        warned.add("outer reason.")
        _inner()
        warned.add("shared reason.")
        warnings.warn("not ours", DeprecationWarning, stacklevel=1)
        warnings.warn_explicit("from another package", UserWarning, "/elsewhere/pkg/mod.py", 3)
    return warned.text


def test_one_warning_per_call_with_every_reason_once():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        text = _outer()
    ours = [w for w in caught if str(w.message) == text]
    assert len(ours) == 1 and ours[0].category is UserWarning
    assert text == "outer reason. Also: inner reason. Also: shared reason."
    assert ours[0].filename == __file__  # the caller of _outer
    others = sorted((w.category.__name__, str(w.message)) for w in caught if w is not ours[0])
    assert others == [("DeprecationWarning", "not ours"), ("UserWarning", "from another package")]


def test_left_out_kinds_and_no_reason_no_warning():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        text = _outer(leave_out=("leak",))
        with OneWarning():
            pass
    assert text == "outer reason. Also: shared reason."
    assert [str(w.message) for w in caught if w.category is UserWarning].count(text) == 1
    assert sum(w.category is UserWarning for w in caught) == 2  # ours and the other package's


def test_an_error_inside_leaves_without_a_warning():
    with warnings.catch_warnings(record=True) as caught, pytest.raises(ValueError, match="boom"):
        warnings.simplefilter("always")
        with OneWarning() as warned:
            warned.add("a reason.")
            raise ValueError("boom")
    assert caught == []
