"""The memory of streamed extraction's passes (torch_amore.search.stream.prepare_stream): a batch is freed before the
source makes the next, and the heap's pages (with codes on disk: the mapping's too) are handed back as the passes go."""

from __future__ import annotations

import pytest
import torch
from torch.multiprocessing.reductions import StorageWeakRef

from torch_amore.data import stream_disk, stream_source
from torch_amore.data.stream_source import RowFingerprint
from torch_amore.search.options import SearchOptions
from torch_amore.search.stream import prepare_stream


def _data(n: int = 3000) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    X = torch.rand(n, 4, generator=g)
    return X, (X[:, 0] > 0.6) & (X[:, 3] < 0.5)


def _tracked(X: torch.Tensor, target: torch.Tensor, step: int, alive: list[bool]):
    """A source of fresh batches that records, before making each batch, whether the one before is still held."""

    def source():
        before = None
        for i in range(0, len(X), step):
            if before is not None:
                alive.append(not before.expired())
            xb = X[i : i + step].clone()
            before = StorageWeakRef(xb.untyped_storage())
            yield xb, target[i : i + step].clone()
            del xb  # the source itself holds no batch

    return source


@pytest.mark.parametrize("bin_strategy", ["uniform", "quantile", "kmeans"])
@pytest.mark.parametrize("on_disk", [False, True])
def test_each_batch_is_freed_before_the_next_is_made(tmp_path, bin_strategy, on_disk):
    X, target = _data()
    alive: list[bool] = []
    options = SearchOptions(bin_strategy=bin_strategy, min_support=100)
    ex = prepare_stream(_tracked(X, target, 250, alive), options, codes_dir=tmp_path if on_disk else None)
    ex.close()
    assert len(alive) >= 2 * 11  # the facts and codes passes (and the sketch's), 11 batches after the first each
    assert not any(alive)


@pytest.mark.parametrize("on_disk", [False, True])
def test_heap_and_mapped_pages_handed_back(tmp_path, monkeypatch, on_disk):
    """The heap is trimmed after each batch of a pass, codes in memory or on disk; with codes on disk the mapped pages
    too, after each piece of the codes pass."""
    calls = {"heap": 0, "pages": 0}
    monkeypatch.setattr(stream_source, "trim_heap", lambda: calls.__setitem__("heap", calls["heap"] + 1))
    hand_back = stream_disk.DiskCodes.trim

    def trim(self):
        calls["pages"] += self.folder is not None
        hand_back(self)

    monkeypatch.setattr(stream_disk.DiskCodes, "trim", trim)
    X, target = _data()
    ex = prepare_stream(_tracked(X, target, 250, []), SearchOptions(min_support=100),
                        codes_dir=tmp_path if on_disk else None)  # fmt: skip
    ex.close()
    assert (calls["heap"], calls["pages"] >= 12) == (2 * 12, on_disk)  # 12 batches


def test_fingerprint_does_not_depend_on_its_pieces(monkeypatch):
    X, target = _data(1000)
    X[::7, 1] = float("nan")
    whole = RowFingerprint(4, X.device)
    whole.update(X, target)
    monkeypatch.setattr(stream_source, "_FINGERPRINT_ROWS", 3)
    pieces = RowFingerprint(4, X.device)
    pieces.update(X[:500], target[:500])
    pieces.update(X[500:], target[500:])
    assert pieces.value() == whole.value() and pieces.rows == whole.rows == 1000
