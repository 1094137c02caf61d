"""Every condition earns its place: conditions that add less than ``min_gain`` fitness are dropped.

Like scikit-learn's ``min_impurity_decrease``, :func:`prune_rule_sets` asks of every condition that removing it lowers
the rule set's fitness on the searched data by at least ``min_gain``. A condition that does not is dropped, the least
useful first (the smallest gain; ties: the later condition), and the shorter rule set is examined again, until every
condition earns its place or one is left. A condition without which the confidence falls below ``min_confidence``
earns its place whatever its gain. The counts come from the rules' masks packed 64 rows to a word, summed over the
shards of a DDP run, so a sharded run prunes as one process does.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator, Sequence

import torch

from torch_amore._utils import distributed as D
from torch_amore._utils.transfer import tensor_on
from torch_amore.rules.metrics import confidence_of_counts, fitness_of_counts, fitness_value
from torch_amore.rules.rule import Rule
from torch_amore.rules.rules import RuleSet

__all__ = ["prune_rule_sets", "prune_rule_sets_batches"]

#: Bytes of the temporary masks and columns built at once.
_MASK_BYTES = 1 << 26


def _bit_counts(words: torch.Tensor) -> torch.Tensor:
    """(..., C) int64: the set bits of each row of (..., C, W) int64 ``words``, by bit tricks on their bytes.

    Example:
        >>> _bit_counts(torch.tensor([[-1, 5], [0, 1 << 40]])).tolist()
        [66, 1]
    """
    x = words.view(torch.uint8)
    x = x - ((x >> 1) & 0x55)  # per 2 bits: their count
    x = (x & 0x33) + ((x >> 2) & 0x33)  # per 4 bits
    x = (x + (x >> 4)) & 0x0F  # per byte
    return x.sum(-1, dtype=torch.int64)


def _packed(masks: torch.Tensor) -> torch.Tensor:
    """(R, N) bool masks as (R, ceil(N / 64)) int64 words of 64 rows each (rows past N: 0), the same rows at the
    same bits in every mask: 8 int64 views of the bytes, shifted by 0..7 bits, summed without carry.

    Example:
        >>> m = torch.zeros(1, 70, dtype=torch.bool)
        >>> m[0, [0, 9, 63, 64]] = True
        >>> _bit_counts(_packed(m)).tolist(), _bit_counts(_packed(m)[:, :1]).tolist()
        ([4], [3])
    """
    n_rows = masks.shape[0]
    if masks.shape[1] == 0:  # an empty shard of a DDP run
        return torch.zeros(n_rows, 0, dtype=torch.int64, device=masks.device)
    m = torch.nn.functional.pad(masks.view(torch.uint8), (0, (-masks.shape[1]) % 64)).contiguous()
    words = m.view(torch.int64).view(n_rows, -1, 8)  # (R, words, 8): 8 rows (one a byte) per int64
    return (words << _shifts(masks.device)).sum(2)


@functools.lru_cache(maxsize=8)
def _shifts(device: torch.device) -> torch.Tensor:
    """``0..7`` as int64 on ``device`` (cached)."""
    return torch.arange(8, dtype=torch.int64, device=device)


def _rule_table(rules: list[Rule], X: torch.Tensor) -> torch.Tensor:
    """(len(rules), N) :meth:`Rule.mask` of each rule: on a float32 or float64 ``X`` each feature's column taken once
    and compared in X's dtype with the bounds of :func:`_bounds_in`; rule by rule otherwise."""
    if X.dtype not in (torch.float32, torch.float64) or X.device.type == "mps":
        return torch.stack([r.mask(X) for r in rules])
    ints = [i for i, r in enumerate(rules) if r.value is None]
    cats = [i for i, r in enumerate(rules) if r.value is not None]
    order = ints + cats  # the intervals' rows, then the categories'
    nan = math.nan
    table = tensor_on(
        [[rules[i].low, rules[i].high, nan] for i in ints] + [[nan, nan, rules[i].value] for i in cats],
        dtype=torch.float64,
        device=X.device,
    )
    bounds = _bounds_in(table, X.dtype)  # (low, high, -) of an interval, (-, -, value) of a category
    # each feature's column taken once (a column of a row-major X is a strided read), then one per rule
    feats = sorted({r.feature for r in rules})
    at = {f: i for i, f in enumerate(feats)}
    index = tensor_on(feats + [at[rules[i].feature] for i in order] + order, device=X.device)
    c = X.t().index_select(0, index[: len(feats)])
    if feats != [rules[i].feature for i in order]:
        c = c.index_select(0, index[len(feats) : len(feats) + len(rules)])  # (rules, N) in X's dtype, in ``order``
    n_int = len(ints)
    inside = (c[:n_int] >= bounds[:n_int, 0:1]) & (c[:n_int] < bounds[:n_int, 1:2])  # NaN: outside (not >= low)
    if cats:
        category = c[n_int:] == bounds[n_int:, 2:3]
        inside = torch.cat([inside, category]) if n_int else category
    if order == list(range(len(rules))):
        return inside
    return torch.empty_like(inside).index_copy_(0, index[len(feats) + len(rules) :], inside)


def _bounds_in(bounds: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """float64 ``bounds`` (low, high, category value) as ``dtype`` with the same comparisons for every ``x`` of
    ``dtype``: bounds rounded up, a category value exact in ``dtype`` or NaN (no value equals it).

    Example:
        >>> t = torch.tensor([[0.1, 0.1, 0.5]], dtype=torch.float64)
        >>> u = _bounds_in(t, torch.float32)
        >>> bool(u[0, 0] >= 0.1), bool(u[0, 0].nextafter(torch.tensor(-1.0)) < 0.1), float(u[0, 2])
        (True, True, 0.5)
    """
    out = bounds.to(dtype)
    if dtype == torch.float64:
        return out
    up = torch.where(out.double() < bounds, torch.nextafter(out, torch.full_like(out, math.inf)), out)
    exact = torch.where(out.double() == bounds, out, torch.full_like(out, math.nan))
    return torch.cat([up[:, :2], exact[:, 2:]], 1)


#: A zero-argument callable returning a fresh iterator of ``(X_batch, target_batch)`` pairs.
Batches = Callable[[], Iterator[tuple[torch.Tensor, torch.Tensor]]]


class _Counter:
    """(hits, support) of conjunctions of ``rules`` (index tuples) on the rows of ``batches``, read once into packed
    masks per chunk of at most ``step`` rows; summed over DDP shards (one host sync per call). ``device``: where
    the counts are made when no batch tells (default: the first batch's, else the CPU)."""

    def __init__(self, rules: list[Rule], batches: Batches, device: torch.device | None = None) -> None:
        self.rules, self.batches, self.device = rules, batches, device
        # per row of a chunk: the rules' float64 columns and comparisons (about 16 bytes a rule), then the masks
        self.step = max(64, _MASK_BYTES // (16 * (len(rules) + 2)) // 64 * 64)
        self._words: list[torch.Tensor] | None = None  # per chunk of rows: the packed masks, made once

    def words(self) -> list[torch.Tensor]:
        """Per chunk of rows, (rules + 2, words): each rule's packed mask, then every row's and the target's (rows
        past the chunk's end: 0 in all of them)."""
        if self._words is None:
            self._words = []
            chunk = _Chunk(len(self.rules) + 2, self.step, self._words)
            for X, target in self.batches():
                if self.device is None:
                    self.device = X.device
                for r0 in range(0, max(1, X.shape[0]), self.step):
                    chunk.add(self._table(X[r0 : r0 + self.step], target[r0 : r0 + self.step]))
            chunk.flush()
        return self._words

    def _table(self, X: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """(rules + 2, n) bool: the rules' masks on the rows ``X``, every row, the target."""
        every = torch.ones_like(target)
        return torch.cat([_rule_table(self.rules, X), torch.stack([every, target])])

    def __call__(self, conjunctions: list[tuple[int, ...]]) -> list[tuple[int, int]]:
        if not conjunctions:
            return []
        chunks = self.words()
        n_rules = len(self.rules)
        depth = max(len(c) for c in conjunctions)
        device = torch.device("cpu") if self.device is None else self.device
        index = tensor_on([list(c) + [n_rules] * (depth - len(c)) for c in conjunctions], device=device)
        parts = []
        for words in chunks:  # the padding rule (every row) and the target: the last two rows
            masks = functools.reduce(torch.bitwise_and, words[index].unbind(1))  # (C, words)
            parts.append(_bit_counts(torch.stack([masks & words[-1], masks])))  # (2, C): hits, support
        total = parts[0] if len(parts) == 1 else functools.reduce(torch.add, parts)
        both = D.all_reduce_sum(total).tolist()  # once per call, whatever the number of batches of each rank
        return list(zip(both[0], both[1]))


class _Chunk:
    """Masks of up to ``step`` rows gathered before they are packed into ``out``: a table as it comes, or, when
    the tables of smaller batches follow one another, their copies side by side in a buffer of ``step`` rows."""

    def __init__(self, height: int, step: int, out: list[torch.Tensor]) -> None:
        self.height, self.step, self.out = height, step, out
        self.held: torch.Tensor | None = None  # the one table of the chunk so far (not copied)
        self.buffer: torch.Tensor | None = None  # (height, step) bool, once a second table joins
        self.rows = 0

    def add(self, table: torch.Tensor) -> None:
        """Add the masks of the next ``table.shape[1]`` rows (at most ``step``)."""
        n = table.shape[1]
        if self.rows + n > self.step:
            self.flush()
        if self.held is None and self.rows == 0:
            self.held = table
        else:
            if self.held is not None:  # a second table: the chunk is copied into the buffer from now on
                if self.buffer is None:
                    self.buffer = torch.empty(self.height, self.step, dtype=torch.bool, device=table.device)
                self.buffer[:, : self.rows] = self.held
                self.held = None
            self.buffer[:, self.rows : self.rows + n] = table
        self.rows += n

    def flush(self) -> None:
        """Pack the rows gathered so far (if any) into ``out``."""
        if self.held is not None:
            self.out.append(_packed(self.held))
        elif self.rows > 0:
            self.out.append(_packed(self.buffer[:, : self.rows]))
        self.held, self.rows = None, 0


def prune_rule_sets(
    rule_sets: Sequence[RuleSet],
    X: torch.Tensor,
    target: torch.Tensor,
    n_target: int,
    *,
    min_gain: float,
    min_confidence: float | None = None,
) -> list[RuleSet]:
    """``rule_sets`` in order, each without the conditions that do not earn ``min_gain`` fitness (see the module); a
    shortened rule set is measured again on ``(X, target)`` (``n_target``: the subgroup's size over all shards), keeps
    its ``target_name`` and ``optimum`` and drops its ``ratios``. ``min_gain <= 0`` returns them as they are.

    Example:
        >>> import torch
        >>> X = torch.tensor([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [1.0, 1.0], [0.0, 1.0]])
        >>> target = torch.tensor([False, True, True, True, False])
        >>> a, b = Rule(0, "a", low=0.5), Rule(1, "b", low=0.5)
        >>> rs = RuleSet((a, b), 2, 1.0, 2 / 3)  # b drops one target row: a alone is fitter
        >>> print(prune_rule_sets([rs], X, target, 3, min_gain=0.001)[0])
        IF a >= 0.5 THEN target  (support=3, confidence=1.000, fitness=1.000)
    """
    return _prune(rule_sets, lambda: iter([(X, target)]), X.device, n_target, min_gain, min_confidence)


def prune_rule_sets_batches(
    rule_sets: Sequence[RuleSet],
    batches: Batches,
    n_target: int,
    *,
    min_gain: float,
    min_confidence: float | None = None,
    device: torch.device | str | None = None,
) -> list[RuleSet]:
    """:func:`prune_rule_sets` on rows that come in batches: the same rule sets as on the concatenated batches. The
    batches are read once, and per row only one bit per distinct rule is kept.

    Args:
        rule_sets: the rule sets, in order.
        batches: a zero-argument callable returning a fresh iterator of ``(X_batch, target_batch)`` pairs: the
            batch's features (n, F) (the columns the rules name) and its boolean target (n,), on one device; under
            DDP, this rank's shard.
        n_target: the subgroup's size (over all shards).
        min_gain: the fitness a condition must add to earn its place; ``<= 0`` returns the rule sets as they are.
        min_confidence: a condition without which the confidence falls below it earns its place whatever its gain.
        device: the batches' device, needed only where a rank may hold no batch (under DDP with NCCL: its GPU);
            default: the first batch's device, else the CPU.

    Returns:
        The rule sets in order, each without the conditions that do not earn ``min_gain`` (see
        :func:`prune_rule_sets`).

    Example:
        >>> import torch
        >>> parts = [(torch.tensor([[0.0, 0.0], [1.0, 0.0]]), torch.tensor([False, True])),
        ...          (torch.tensor([[1.0, 1.0], [1.0, 1.0], [0.0, 1.0]]), torch.tensor([True, True, False]))]
        >>> both = RuleSet((Rule(0, "a", low=0.5), Rule(1, "b", low=0.5)), 2, 1.0, 2 / 3)
        >>> pruned = prune_rule_sets_batches([both], lambda: iter(parts), 3, min_gain=0.001)
        >>> print(pruned[0])  # b drops one target row: a alone is fitter
        IF a >= 0.5 THEN target  (support=3, confidence=1.000, fitness=1.000)
    """
    where = None if device is None else torch.device(device)
    return _prune(rule_sets, batches, where, n_target, min_gain, min_confidence)


def _prune(
    rule_sets: Sequence[RuleSet],
    batches: Batches,
    device: torch.device | None,
    n_target: int,
    min_gain: float,
    min_confidence: float | None,
) -> list[RuleSet]:
    """The pruning of :func:`prune_rule_sets` with the counts of :class:`_Counter` on ``batches``."""
    out = list(rule_sets)
    if min_gain <= 0:
        return out
    bar = min_gain * n_target  # gains compared in counts: fitness x n_target = 2 hits - support
    long = [i for i, rs in enumerate(out) if len(rs.rules) >= 2]
    unique = list(dict.fromkeys(r for i in long for r in out[i].rules))
    at = {r: k for k, r in enumerate(unique)}
    count = _Counter(unique, batches, device)
    current = {i: tuple(at[r] for r in out[i].rules) for i in long}
    known: dict[frozenset, tuple[int, int]] = {}  # (hits, support) of each conjunction counted (shared by many)
    while current:
        order = sorted(current)
        wanted = [current[i] for i in order] + [
            current[i][:k] + current[i][k + 1 :] for i in order for k in range(len(current[i]))
        ]
        todo = list(dict.fromkeys(frozenset(c) for c in wanted if frozenset(c) not in known))
        known.update(zip(todo, count([tuple(sorted(c)) for c in todo])))
        nxt: dict[int, tuple[int, ...]] = {}
        for i in order:
            rules = current[i]
            hits, support = known[frozenset(rules)]
            value = fitness_value(hits, support)
            worst: tuple[float, int, tuple[int, int]] | None = None
            for k in range(len(rules)):
                sub_hits, sub_support = known[frozenset(rules[:k] + rules[k + 1 :])]
                gain = value - fitness_value(sub_hits, sub_support)
                if gain >= bar:
                    continue
                if min_confidence is not None and confidence_of_counts(sub_hits, sub_support) < min_confidence:
                    continue  # without it the rule set is no longer confident enough
                if worst is None or (gain, -k) <= (worst[0], -worst[1]):
                    worst = (gain, k, (sub_hits, sub_support))
            if worst is None:
                continue
            _, k, counts = worst
            kept = rules[:k] + rules[k + 1 :]
            if len(kept) >= 2:
                nxt[i] = kept
            rs = out[i]
            out[i] = RuleSet(
                rules=tuple(unique[j] for j in kept),
                support=counts[1],
                confidence=confidence_of_counts(*counts),
                fitness=fitness_of_counts(*counts, n_target),
                target_name=rs.target_name,
                optimum=rs.optimum,
            )
        current = nxt
    return out
