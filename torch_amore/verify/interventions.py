"""Interventions on a layer's units (or a model's input features): the replacement values and the patched passes.

A unit is a column of the flattened (N, D) matrix the rules were built on (a concept of the basis for rules over
concepts, set through ``basis.intervene``). Replacement methods, into the rule set (sufficiency) or out of it
(necessity): ``"resample"`` copies the units of one donor sample satisfying (violating) the rule set; ``"clamp"``
moves each unit to the nearest observed value inside (outside) its interval, a control unit by rank
(:func:`clamp_by_rank`); ``"mean"`` takes the donors' mean.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, IterableDataset, Subset

from torch_amore._utils.typing import BatchKey
from torch_amore.concepts.basis import ConceptBasis
from torch_amore.data.arguments import did_you_mean
from torch_amore.model.batches import batch_len, iter_batches
from torch_amore.model.forward import ModelArgs, eval_mode, hook_on, model_device, model_feed, output_tensor
from torch_amore.rules.rule import Rule

#: The replacement methods :func:`torch_amore.verify.verification.verify` accepts.
METHODS = ("resample", "clamp", "mean")


def check_method(method: Any) -> str:
    """``method`` if it names a replacement method, else a ValueError suggesting the closest.

    Example:
        >>> check_method("resample")
        'resample'
        >>> check_method("clmap")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: Expected `method` to be one of ['resample', 'clamp', 'mean'], but got 'clmap' (did you mean ...
    """
    if isinstance(method, str) and method in METHODS:
        return method
    raise ValueError(
        f"Expected `method` to be one of {list(METHODS)}, but got {method!r}{did_you_mean(method, METHODS)}."
    )


# --------------------------------------------------------------------------------------------------- replacement values


def _nearest(candidates: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """For each of ``values``, the nearest of the sorted, non-empty ``candidates`` (ties: the lower)."""
    pos = torch.searchsorted(candidates, values).clamp(1, candidates.numel() - 1) if candidates.numel() > 1 else None
    if pos is None:
        return candidates.expand(values.shape[0])
    below, above = candidates[pos - 1], candidates[pos]
    return torch.where((values - below).abs() <= (above - values).abs(), below, above)


def _inside(rule: Rule, values: torch.Tensor) -> torch.Tensor:
    """Which of the float64 ``values`` satisfy ``rule``."""
    if rule.value is not None:
        return values == rule.value
    return (values >= rule.low) & (values < rule.high)


def clamp_unit(column: torch.Tensor, rows: torch.Tensor, rule: Rule, into: bool) -> torch.Tensor:
    """The values of one unit (``column``, float64 over the verified samples) for ``rows`` after clamping into
    (``into``) or out of ``rule``'s interval: the nearest observed value inside / outside it (NaN when there is none).

    Example:
        >>> import torch
        >>> col = torch.tensor([0.0, 1.0, 2.0, 3.0, 4.0], dtype=torch.float64)
        >>> clamp_unit(col, torch.tensor([0, 4]), Rule(0, "z", low=1.5, high=3.5), into=True).tolist()
        [2.0, 3.0]
        >>> clamp_unit(col, torch.tensor([2, 3]), Rule(0, "z", low=1.5, high=3.5), into=False).tolist()
        [1.0, 4.0]
    """
    observed = torch.unique(column[~torch.isnan(column)])  # sorted
    values = column[rows]
    keep = _inside(rule, observed)
    candidates = observed[keep] if into else observed[~keep]
    if candidates.numel() == 0:
        return torch.full_like(values, math.nan)
    moved = _nearest(candidates, values)
    return torch.where(_inside(rule, values), values, moved) if into else moved


def rank_bounds(column: torch.Tensor, rule: Rule) -> tuple[int, int]:
    """The ranks ``[a, b)`` (in ``column`` sorted ascending) of the values ``rule`` holds on its own unit.

    Example:
        >>> import torch
        >>> rank_bounds(torch.tensor([5.0, 1.0, 3.0, 2.0], dtype=torch.float64), Rule(0, "z", low=2.0, high=4.0))
        (1, 3)
    """
    if rule.value is not None:
        return int((column < rule.value).sum()), int((column <= rule.value).sum())
    return int((column < rule.low).sum()), int((column < rule.high).sum())


def clamp_by_rank(column: torch.Tensor, rows: torch.Tensor, a: int, b: int, into: bool) -> torch.Tensor:
    """A control unit's values for ``rows`` clamped by rank into (``into``) or out of the ranks ``[a, b)`` of its
    sorted values: into, to the value at the nearest rank inside (a value inside stays); out, to the nearer of the
    values at ranks ``a - 1`` and ``b``. NaN where there is no such rank.

    Example:
        >>> import torch
        >>> col = torch.tensor([40.0, 10.0, 30.0, 20.0, 50.0], dtype=torch.float64)
        >>> clamp_by_rank(col, torch.tensor([1, 2, 4]), 1, 3, into=True).tolist()
        [20.0, 30.0, 30.0]
        >>> clamp_by_rank(col, torch.tensor([3, 2]), 1, 3, into=False).tolist()
        [10.0, 40.0]
    """
    ranked = torch.sort(column).values
    values = column[rows]
    n = ranked.numel()
    if into:
        if a >= b:
            return torch.full_like(values, math.nan)
        rank = torch.searchsorted(ranked, values)  # the first rank of each value
        moved = torch.where(rank < a, ranked[a], ranked[b - 1])
        return torch.where((rank >= a) & (rank < b), values, moved)
    below = ranked[a - 1] if a > 0 else torch.tensor(math.nan, dtype=ranked.dtype)
    above = ranked[b] if b < n else torch.tensor(math.nan, dtype=ranked.dtype)
    use_below = ~torch.isnan(below) & (torch.isnan(above) | ((values - below).abs() <= (above - values).abs()))
    return torch.where(use_below, below.expand_as(values), above.expand_as(values))


def random_units(others: torch.Tensor, rows: int, k: int, generator: torch.Generator) -> torch.Tensor:
    """(rows, k) units: for each row, k distinct units drawn uniformly from ``others``.

    Example:
        >>> import torch
        >>> units = random_units(torch.tensor([3, 5, 7]), 4, 2, torch.Generator().manual_seed(0))
        >>> units.shape, bool((units[:, 0] != units[:, 1]).all())
        (torch.Size([4, 2]), True)
    """
    if k > len(others):
        raise ValueError(f"Expected at least {k} units to draw from, but got {len(others)}.")
    idx = torch.randint(len(others), (rows, k), generator=generator)
    while k > 1:
        ordered = idx.sort(1).values
        repeated = (ordered[:, 1:] == ordered[:, :-1]).any(1)
        if not bool(repeated.any()):
            break
        idx[repeated] = torch.randint(len(others), (int(repeated.sum()), k), generator=generator)
    return others[idx]


# -------------------------------------------------------------------------------------------------------------- samples


def subset_batches(inputs: Any, index: torch.Tensor, batch_size: int, input_key: BatchKey = None) -> Iterator:
    """Batches of (model input, None) of the samples ``index`` (in that order) of ``inputs``; tensors are indexed
    one batch at a time (no copy of all the samples).

    Example:
        >>> import torch
        >>> [b.tolist() for b, _ in subset_batches(torch.arange(5), torch.tensor([4, 0, 2]), 2)]
        [[4, 0], [2]]
    """
    if isinstance(inputs, torch.Tensor) or (isinstance(inputs, tuple) and all(torch.is_tensor(t) for t in inputs)):
        return ((_rows_of(inputs, index[i : i + batch_size]), None) for i in range(0, len(index), batch_size))
    return iter_batches(subset_inputs(inputs, index, batch_size), batch_size, input_key, None)[0]


def _rows_of(inputs: torch.Tensor | tuple, index: torch.Tensor) -> Any:
    if isinstance(inputs, tuple):
        return tuple(t[index.to(t.device)] for t in inputs)
    return inputs[index.to(inputs.device)]


def subset_inputs(inputs: Any, index: torch.Tensor, batch_size: int) -> Any:
    """The samples ``index`` (in that order) of a list of graphs, a Dataset or a DataLoader (lazily where it can)."""
    idx = index.tolist()
    if isinstance(inputs, (list, tuple)):  # graphs
        return [inputs[i] for i in idx]
    if isinstance(inputs, DataLoader):
        if isinstance(inputs.dataset, IterableDataset):
            raise TypeError("Expected a DataLoader over a map-style Dataset to verify rules, not an IterableDataset.")
        return DataLoader(
            Subset(inputs.dataset, idx),
            batch_size=inputs.batch_size or batch_size,
            shuffle=False,
            collate_fn=inputs.collate_fn,
            num_workers=inputs.num_workers,
        )
    if isinstance(inputs, Dataset):
        return Subset(inputs, idx)
    raise TypeError(f"Expected `inputs` that can be indexed by sample, but got {type(inputs).__name__}.")


def subset_args(model_args: ModelArgs, index: torch.Tensor, n: int) -> ModelArgs:
    """``model_args`` with the per-sample entries (one row per sample of ``n``) cut to the rows ``index``."""
    pick = lambda v: v[index.to(v.device)] if isinstance(v, torch.Tensor) and v.ndim and v.shape[0] == n else v  # noqa: E731
    return ModelArgs(tuple(pick(a) for a in model_args.args), {k: pick(v) for k, v in model_args.kwargs.items()})


# ------------------------------------------------------------------------------------------------------- patched passes


class _Patch:
    """Forward hook (or pre-hook for the layer's input) setting, in each row of the current batch, the flattened
    ``units`` (B, U) to ``values`` (B, U); counts its calls so that a layer running twice per pass is refused. With a
    list ``encoded``, each batch's patched activations are encoded again and their concepts ``units`` kept there (on
    the CPU): a basis whose encoder does not give back the concepts it was given (a top-k sparse autoencoder
    re-selecting its k) may undo a patch."""

    def __init__(self, basis: ConceptBasis | None = None, encoded: list[torch.Tensor] | None = None) -> None:
        self.units: torch.Tensor | None = None
        self.values: torch.Tensor | None = None
        self.calls = 0
        self.basis = basis
        self.encoded = encoded

    def apply(self, tensor: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.values is None or self.units is None:
            return tensor
        if self.basis is not None:  # the concepts ``units`` set to ``values``: a' = intervene(a, c')
            flat = tensor.reshape(tensor.shape[0], -1)
            concepts = self.basis.encode(flat).clone()
            concepts.scatter_(1, self.units, self.values.to(concepts.dtype))
            patched = self.basis.intervene(flat, concepts).reshape(tensor.shape).to(tensor.dtype)
            if self.encoded is not None:
                again = self.basis.encode(patched.reshape(tensor.shape[0], -1))
                self.encoded.append(again.gather(1, self.units.to(again.device)).cpu())
            return patched
        patched = tensor.clone(memory_format=torch.contiguous_format)
        flat = patched.reshape(patched.shape[0], -1)  # a view of the contiguous clone
        flat.scatter_(1, self.units, self.values.to(flat.dtype))
        return patched

    def output_hook(self, module: nn.Module, args: tuple, output: Any) -> Any:
        if isinstance(output, tuple):
            return (self.apply(output[0]), *output[1:])
        return self.apply(output)

    def input_hook(self, module: nn.Module, args: tuple) -> Any:
        return (self.apply(args[0]), *args[1:])


def patched_outputs(
    model: nn.Module,
    inputs: Any,
    index: torch.Tensor,
    units: torch.Tensor,
    values: torch.Tensor,
    *,
    layer: nn.Module | None,
    layer_input: bool,
    batch_size: int,
    input_key: BatchKey = None,
    model_args: ModelArgs | None = None,
    basis: ConceptBasis | None = None,
    encode_again: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The model's outputs (eval mode, inference mode) on the samples ``index`` (M) of ``inputs`` with the flattened
    ``units`` of the i-th (the same (U,) for all, or (M, U)) set to ``values[i]``: on the layer (concepts with a
    ``basis``) through a hook, or on the inputs when ``layer`` is None; and, with ``encode_again`` and a ``basis``,
    the (M, U) concepts ``units`` of the patched activations encoded again (else None)."""
    device = model_device(model)
    feed = model_feed(model, ModelArgs() if model_args is None else model_args, values.shape[0])
    values = values.to(device)
    units = units.to(device).expand(values.shape[0], -1)
    encoded: list[torch.Tensor] | None = [] if encode_again and basis is not None else None
    patch = _Patch(basis, encoded)
    outputs, start = [], 0
    hook = patch.input_hook if layer_input else patch.output_hook
    with eval_mode(model), hook_on(layer, hook, pre=layer_input), torch.inference_mode():
        for inp, _ in subset_batches(inputs, index, batch_size, input_key):
            fed, args, kwargs = feed(inp, start)
            rows = batch_len(fed)
            patch.units, patch.values, patch.calls = units[start : start + rows], values[start : start + rows], 0
            if layer is None:
                fed = patch.apply(fed)
            out = model(*fed, *args, **kwargs) if isinstance(fed, tuple) else model(fed, *args, **kwargs)
            out = output_tensor(out)
            if layer is not None and patch.calls != 1:
                raise ValueError(f"Expected the layer to run once per forward pass, but it ran {patch.calls} times.")
            outputs.append(out)
            start += out.shape[0]
    return torch.cat(outputs), None if encoded is None else torch.cat(encoded)
