"""One ``UserWarning`` per public call: the reasons a call has to warn, collected while it runs and emitted together.

Inside ``with OneWarning() as warned:``, every reason added with :meth:`OneWarning.add` and every ``UserWarning`` of
torch_amore's own modules is kept, and leaves as ONE ``UserWarning`` when the block ends (each reason once, in order).
An inner collector hands its reasons to the outer one, which alone warns; other warnings pass through unchanged.
"""

from __future__ import annotations

import threading
import warnings
from pathlib import Path
from types import TracebackType

_PACKAGE = str(Path(__file__).resolve().parents[1])
_local = threading.local()


def _stack() -> list[OneWarning]:
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


class OneWarning:
    """Collects the reasons a call has to warn and issues them as one ``UserWarning`` when the call ends.

    Args:
        stacklevel: as in :func:`warnings.warn`, counted from the function that holds the ``with`` block (2: its
            caller).
        leave_out: kinds of reasons (see :meth:`add`) this call does not give, also those of inner collectors.

    Example:
        >>> import warnings
        >>> def call():
        ...     with OneWarning() as warned:
        ...         warned.add("the first reason.")
        ...         warned.add("the second reason.")
        ...         warned.add("the first reason.")  # each reason once
        ...     return warned.text
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     text = call()
        >>> len(caught), str(caught[0].message) == text
        (1, True)
        >>> text
        'the first reason. Also: the second reason.'
    """

    def __init__(self, stacklevel: int = 2, *, leave_out: tuple[str, ...] = ()) -> None:
        self.stacklevel = stacklevel
        self.leave_out = tuple(leave_out)
        self.reasons: list[str] = []
        self.kinds: list[str] = []
        self._catcher: warnings.catch_warnings | None = None
        self._caught: list[warnings.WarningMessage] = []

    def add(self, reason: str, kind: str = "") -> None:
        """Keep ``reason`` (a sentence; '', repeats and kinds in ``leave_out`` are left out); ``kind`` names what
        it is about (e.g. ``"leak"``) for an outer call that leaves that kind out."""
        reason = str(reason).strip()
        if reason and reason not in self.reasons and kind not in self.leave_out:
            self.reasons.append(reason)
            self.kinds.append(kind)

    @property
    def text(self) -> str:
        """The one message: the reasons in order ('' when there is none)."""
        return " Also: ".join(self.reasons)

    def __enter__(self) -> OneWarning:
        self._catcher = warnings.catch_warnings(record=True)
        self._caught = self._catcher.__enter__()
        warnings.simplefilter("always")
        _stack().append(self)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        _stack().remove(self)
        if self._catcher is not None:
            self._catcher.__exit__(kind, error, trace)
        passed = []
        for w in self._caught:
            if w.category is UserWarning and str(Path(w.filename).resolve()).startswith(_PACKAGE):
                self.add(str(w.message))
            else:
                passed.append(w)
        for w in passed:  # other packages' warnings and other categories: unchanged
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)
        outer = _stack()
        if outer:
            for reason, reason_kind in zip(self.reasons, self.kinds):
                outer[-1].add(reason, reason_kind)
        elif self.reasons and kind is None:
            warnings.warn(self.text, UserWarning, stacklevel=self.stacklevel + 1)
