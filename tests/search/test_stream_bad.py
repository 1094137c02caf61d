"""Bad sources of batches get a clear error naming the problem and what to pass instead, before the search."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from torch_amore import extract_rules
from torch_amore.data.stream_source import FINGERPRINT_COLUMNS, BatchSource


def data(n: int = 300, f: int = 3, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, f, generator=g)
    return X, X[:, 0] > 0.6


def per_pass(make):
    """A callable source whose k-th call (pass k, from 0) yields the batches ``make(k)``."""
    calls = []

    def source():
        calls.append(1)
        return iter(make(len(calls) - 1))

    return source


def split(X, t, step=50):
    return [(X[i : i + step], t[i : i + step]) for i in range(0, len(X), step)]


@pytest.fixture(autouse=True)
def no_search(monkeypatch):
    """Any search reached fails the test: every error here must come before it."""

    def fail(*args, **kwargs):
        raise AssertionError("the search ran")

    monkeypatch.setattr("torch_amore.search.extractor.Extractor.extract", fail)


def test_one_shot_generator():
    X, t = data()
    with pytest.raises(ValueError, match="re-iterable.*one-shot generator.*fresh iterator"):
        extract_rules(b for b in split(X, t))
    with pytest.raises(ValueError, match="one-shot list_iterator"):
        extract_rules(iter(split(X, t)))


def test_callable_returning_the_same_exhausted_iterator():
    X, t = data()
    it = iter(split(X, t))
    with pytest.raises(ValueError, match="same iterator object.*one-shot"):
        extract_rules(lambda: it)


@pytest.mark.parametrize("second", [250, 350])
def test_second_pass_with_other_row_count(second):
    X, t = data(400)
    source = per_pass(lambda k: split(X[:300], t[:300]) if k == 0 else split(X[:second], t[:second]))
    with pytest.raises(ValueError, match=r"yield 300 rows on every pass.*codes pass yielded"):
        extract_rules(source)


def test_second_pass_empty_says_one_shot():
    X, t = data()
    source = per_pass(lambda k: split(X, t) if k == 0 else [])
    with pytest.raises(ValueError, match="yielded 0 .*one-shot"):
        extract_rules(source)


def test_second_pass_with_other_width():
    X, t = data(f=4)
    source = per_pass(lambda k: split(X, t) if k == 0 else split(X[:, :3], t))
    with pytest.raises(ValueError, match=r"width of its first batch \(4\).*has 3"):
        extract_rules(source)


def test_shuffling_dataloader_refused_up_front():
    X, t = data()
    with pytest.raises(ValueError, match="shuffles.*shuffle=False"):
        extract_rules(DataLoader(TensorDataset(X, t), batch_size=32, shuffle=True))


@pytest.mark.parametrize("how", ["across batches", "within a batch", "target only"])
def test_rows_in_another_order_on_the_second_pass(how):
    X, t = data()
    perm = torch.randperm(len(X), generator=torch.Generator().manual_seed(1))
    if how == "within a batch":
        perm = torch.cat([torch.arange(50).flip(0), torch.arange(50, len(X))])
    X2, t2 = (X[perm], t[perm]) if how != "target only" else (X, t.roll(1))
    source = per_pass(lambda k: split(X, t) if k == 0 else split(X2, t2))
    with pytest.raises(ValueError, match="same order on every pass.*shuffling.*shuffle=False"):
        extract_rules(source)


def test_a_column_the_hash_does_not_read_changing_its_values_on_the_second_pass():
    """The order-sensitive hash reads 16 evenly spaced columns; a column outside them whose values change between
    passes changes its range, which every pass is compared on too (the values would otherwise be coded at the end of
    the first pass's grid, and the rules lose the column)."""
    X, t = data(f=64)
    assert 1 not in [j * 64 // FINGERPRINT_COLUMNS for j in range(FINGERPRINT_COLUMNS)]  # column 1 is not hashed
    changed = X.clone()
    changed[:, 1] = changed[:, 1] * 3 + 1
    source = per_pass(lambda k: split(X, t) if k == 0 else split(changed, t))
    with pytest.raises(ValueError, match="same order on every pass.*or with other values"):
        extract_rules(source)


def test_other_batch_sizes_on_the_second_pass_are_fine():
    """The same rows in the same order, cut differently: accepted (the search then runs)."""
    X, t = data()
    source = per_pass(lambda k: split(X, t, 50 if k == 0 else 7))
    with pytest.raises(AssertionError, match="the search ran"):
        extract_rules(source)


def test_batches_of_another_dtype():
    X, t = data()
    batches = split(X, t)
    batches[2] = (batches[2][0].double(), batches[2][1])
    with pytest.raises(ValueError, match=r"dtype of its first batch \(torch.float32\).*batch 2.*X_batch.to"):
        extract_rules(lambda: iter(batches))


def test_batches_on_another_device():
    """The check compares each batch's device with the first batch's (here: as if the first pass ran elsewhere)."""
    X, t = data()
    src = BatchSource(lambda: iter(split(X, t)))
    list(src.batches("first"))
    src.device = torch.device("meta")
    with pytest.raises(ValueError, match=r"device of its first batch \(meta\).*move every batch"):
        list(src.batches("second"))


def test_empty_sources():
    X, t = data()
    with pytest.raises(ValueError, match="at least one row.*yielded none"):
        extract_rules(lambda: iter([]))
    with pytest.raises(ValueError, match="at least one row"):
        extract_rules(lambda: iter([(X[:0], t[:0])]))


def test_bad_batches():
    X, t = data()
    with pytest.raises(TypeError, match=r"pair \(X_batch, target_batch\).*batch 0.*Tensor"):
        extract_rules(lambda: iter([X]))
    with pytest.raises(ValueError, match=r"one entry per row of X_batch \(50\).*batch 0"):
        extract_rules(lambda: iter([(X[:50], t[:40])]))
    with pytest.raises(TypeError, match="boolean.*0/1.*batch 0"):
        extract_rules(lambda: iter([(X[:50], torch.full((50,), 2))]))
    with pytest.raises(ValueError, match=r"shape \(N, F\)"):
        extract_rules(lambda: iter([(X[:50, 0], t[:50])]))


def test_target_argument_with_a_source():
    X, t = data()
    with pytest.raises(ValueError, match="target=None.*each batch carries its target"):
        extract_rules(lambda: iter(split(X, t)), t)


def test_infinite_values_and_trivial_target():
    X, t = data()
    X2 = X.clone()
    X2[7, 1] = float("inf")
    with pytest.raises(ValueError, match=r"finite values.*column 1 holds \+-inf"):
        extract_rules(lambda: iter(split(X2, t)))
    with pytest.raises(ValueError, match="subgroup is empty"):
        extract_rules(lambda: iter(split(X, t & False)))
    with pytest.raises(ValueError, match="min_support"):
        extract_rules(lambda: iter(split(X, t)), min_support=10_000)
