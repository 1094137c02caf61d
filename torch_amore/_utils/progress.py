"""Progress bars (tqdm) that cost nothing when switched off."""

from __future__ import annotations

from typing import Any


class _Silent:
    """The part of tqdm's interface the searches use, doing nothing."""

    def update(self, n: int = 1) -> None:
        pass

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        pass

    def close(self) -> None:
        pass


def progress_bar(enabled: bool, **kwargs: Any) -> Any:
    """A transient ``tqdm.auto.tqdm(leave=False, **kwargs)`` when ``enabled``, else a silent stand-in.

    Example:
        >>> bar = progress_bar(False, total=3, desc="settings")
        >>> bar.update(1); bar.close()
    """
    if not enabled:
        return _Silent()
    from tqdm.auto import tqdm

    return tqdm(leave=False, **kwargs)
