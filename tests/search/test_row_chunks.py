"""Searches that count their nodes from the nodes' conditions, a chunk of rows at a time (``Extractor.row_chunk``,
used for codes on disk), find the same rule lists as those that keep the nodes' rows."""

from __future__ import annotations

import pytest
import torch
from test_stream import TYPES, assert_same, batches_of, mixed_data

from torch_amore import extract_rules
from torch_amore.search.extractor import Extractor
from torch_amore.strategies import tree
from torch_amore.strategies.beam import BeamSearch
from torch_amore.strategies.polish import sweep


@pytest.mark.parametrize("strategy", ["paper", "beam", "exact"])
@pytest.mark.parametrize("max_length", [1, 2, 3])
@pytest.mark.parametrize("row_chunk", [1, 37])
def test_chunked_counts_give_the_same_rules(monkeypatch, strategy, max_length, row_chunk):
    X, target = mixed_data(500, seed=11)
    kw = dict(strategy=strategy, feature_types=TYPES, min_support=25, max_length=max_length)
    expected = extract_rules(X, target, **kw)
    calls = []
    counted = tree.box_counts

    def spy(*args, **kwargs):
        calls.append(args[4])
        return counted(*args, **kwargs)

    monkeypatch.setattr(Extractor, "row_chunk", row_chunk)
    monkeypatch.setattr(tree, "box_counts", spy)
    assert_same(extract_rules(X, target, **kw), expected)
    if strategy != "exact" and max_length > 1:  # the tree's levels below the root were counted chunk by chunk
        assert calls and set(calls) == {row_chunk}


def test_local_rules_with_chunked_counts(monkeypatch):
    X, target = mixed_data(400, seed=12)
    x = X[torch.nonzero(target)[0, 0]]
    kw = dict(feature_types=TYPES, min_support=20, max_length=3, local_x=x)
    expected = extract_rules(X, target, **kw)
    monkeypatch.setattr(Extractor, "row_chunk", 29)
    assert_same(extract_rules(X, target, **kw), expected)


def test_codes_on_disk_count_chunk_by_chunk(tmp_path, monkeypatch):
    """Streamed with codes on disk: the beam counts its nodes from their conditions (no row lists), in chunks
    smaller than the data here, and the rule lists equal the in-memory ones."""
    X, target = mixed_data(700, seed=13)
    kw = dict(strategy="beam", feature_types=TYPES, min_support=30, max_length=3)
    chunks = []
    original = BeamSearch._node_counts

    def spy(self, nodes):
        chunks.append(self.row_chunk)
        return original(self, nodes)

    monkeypatch.setattr("torch_amore.search.stream.ROW_CHUNK", 64)
    scanned = []
    original_scan = sweep._scanned_compact_cuts
    monkeypatch.setattr(sweep, "_scanned_compact_cuts", lambda *a: scanned.append(1) or original_scan(*a))
    monkeypatch.setattr(BeamSearch, "_node_counts", spy)
    got = extract_rules(batches_of(X, target, 50), codes_dir=tmp_path, **kw)
    assert chunks and set(chunks) == {64} and scanned  # the polish scanned its samples' sorted keys
    assert_same(got, extract_rules(X, target, **kw))
