"""The batches of a model's inputs: tensors, Datasets, DataLoaders and graph lists cut into batches, the inputs and
labels of each batch, and the number of rows.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, IterableDataset, SequentialSampler

from torch_amore._utils.typing import BatchKey


def is_graph(obj: Any) -> bool:
    """A torch_geometric ``Data`` or ``Batch`` (recognised without importing torch_geometric)."""
    from_pyg = any(c.__module__.startswith("torch_geometric") for c in type(obj).__mro__)  # Batch classes are dynamic
    return from_pyg and hasattr(obj, "num_nodes")


def _graph_list(inputs: Any) -> bool:
    return isinstance(inputs, (list, tuple)) and bool(inputs) and all(is_graph(g) for g in inputs)


def batch_len(inp: Any) -> int | None:
    """Number of samples in one model input (tensor, tuple of tensors or graph batch); None if unknown."""
    if isinstance(inp, torch.Tensor):
        return int(inp.shape[0]) if inp.ndim else 1
    if isinstance(inp, tuple) and inp and isinstance(inp[0], torch.Tensor) and inp[0].ndim:
        return int(inp[0].shape[0])
    if hasattr(inp, "num_graphs"):
        return int(inp.num_graphs)
    return None


def check_row_order(inputs: Any, why: str) -> None:
    """Refuse a DataLoader whose order is not the dataset's (rows must align with ``why``)."""
    if not isinstance(inputs, DataLoader) or isinstance(inputs.dataset, IterableDataset):
        return
    batch_sampler = inputs.batch_sampler
    ordered = isinstance(inputs.sampler, SequentialSampler) and (
        batch_sampler is None or isinstance(batch_sampler, BatchSampler)
    )
    if not ordered:
        used = type(inputs.sampler if isinstance(batch_sampler, BatchSampler) else batch_sampler).__name__
        raise ValueError(
            f"Expected a DataLoader that yields the rows in order (shuffle=False, no sampler), but it uses a {used}: "
            f"its order must match {why}."
        )


def _pick(batch: Any, key: int | str, what: str) -> Any:
    try:
        if isinstance(key, str) and not isinstance(batch, Mapping):
            return getattr(batch, key)
        return batch[key]
    except (KeyError, IndexError, AttributeError, TypeError):
        shown = f"keys {list(batch.keys())}" if isinstance(batch, Mapping) else f"a {type(batch).__name__}"
        raise ValueError(
            f"Expected `{what}` {key!r} to select an element of each batch, but the batch is {shown}."
        ) from None


def check_batch_key(key: Any, name: str) -> None:
    """A ``TypeError`` naming ``name`` unless ``key`` is a :data:`BatchKey`: an index or key (int or str), a sequence
    of them, a callable on the batch, or None.

    Example:
        >>> check_batch_key(3.5, "input_key")
        Traceback (most recent call last):
        ...
        TypeError: Expected `input_key` to be an index or key of the batches (an int or str), ... but got 3.5.
    """

    def one(k: Any) -> bool:
        return isinstance(k, (int, str)) and not isinstance(k, bool)

    ok = (
        key is None
        or callable(key)
        or one(key)
        or (isinstance(key, (tuple, list)) and bool(key) and all(map(one, key)))
    )
    if not ok:
        raise TypeError(
            f"Expected `{name}` to be an index or key of the batches (an int or str), a sequence of them, a callable "
            f"on the batch or None, but got {key!r}."
        )


def split_batch(batch: Any, input_key: BatchKey = None, label_key: BatchKey = None) -> tuple[Any, Any]:
    """(model input, labels or None) of one batch; a tuple model input means several positional arguments.

    By default a tensor batch is the input, a tuple/list batch is ``(input, labels, ...)``, and any other object
    (e.g. a torch_geometric ``Batch``) is the input as a whole.

    Example:
        >>> import torch
        >>> split_batch((torch.zeros(2, 3), torch.tensor([0, 1])))[1]
        tensor([0, 1])
        >>> split_batch({"x": 1, "y": 2}, input_key="x", label_key="y")
        (1, 2)
    """
    if input_key is None:
        if isinstance(batch, Mapping):
            raise ValueError(
                "Expected `input_key` to say which element of the dict batches is the model input, but got None; "
                f"the batches have keys {list(batch.keys())}."
            )
        inp = batch[0] if isinstance(batch, (tuple, list)) else batch
    elif callable(input_key):
        inp = input_key(batch)
    elif isinstance(input_key, (tuple, list)):
        inp = tuple(_pick(batch, k, "input_key") for k in input_key)
    else:
        inp = _pick(batch, input_key, "input_key")
    if label_key is None:
        labels = batch[1] if isinstance(batch, (tuple, list)) and len(batch) > 1 and input_key is None else None
    elif callable(label_key):
        labels = label_key(batch)
    else:
        labels = _pick(batch, label_key, "label_key")
    return inp, labels


def n_rows(inputs: Any) -> int | None:
    """Number of samples when it is known before running the model (those the model sees: a DataLoader with
    ``drop_last=True`` leaves out its last partial batch); a TypeError for unsupported inputs."""
    if isinstance(inputs, torch.Tensor):
        return int(inputs.shape[0]) if inputs.ndim else 1
    if isinstance(inputs, tuple) and inputs and all(isinstance(t, torch.Tensor) and t.ndim for t in inputs):
        return int(inputs[0].shape[0])
    if _graph_list(inputs):
        return len(inputs)
    if not isinstance(inputs, (Dataset, DataLoader)):
        raise TypeError(_INPUT_KINDS + f"{type(inputs).__name__}.")
    try:
        n = len(inputs.dataset) if isinstance(inputs, DataLoader) else len(inputs)
    except TypeError:
        return None
    size = getattr(inputs, "batch_size", None) if getattr(inputs, "drop_last", False) else None
    return n - n % size if size else n  # drop_last: the last partial batch never reaches the model


def iter_batches(inputs: Any, batch_size: int, input_key: BatchKey, label_key: BatchKey) -> tuple[Iterator, int | None]:
    """Iterator over (model input, labels) and the number of batches (None if unknown)."""
    if isinstance(inputs, torch.Tensor):
        if inputs.ndim == 0:
            raise ValueError("Expected `inputs` to have a batch dimension, but got a 0-dim tensor.")
        n = inputs.shape[0]
        return ((inputs[i : i + batch_size], None) for i in range(0, n, batch_size)), math.ceil(n / batch_size)
    if isinstance(inputs, tuple):
        if not inputs or not all(isinstance(t, torch.Tensor) for t in inputs):
            raise TypeError("Expected a tuple `inputs` to hold tensors (the model's positional inputs).")
        n = inputs[0].shape[0]
        if any(t.shape[0] != n for t in inputs):
            raise ValueError(
                f"Expected the tensors of `inputs` to have the same length, got {[len(t) for t in inputs]}."
            )
        it = ((tuple(t[i : i + batch_size] for t in inputs), None) for i in range(0, n, batch_size))
        return it, math.ceil(n / batch_size)
    if _graph_list(inputs):
        from torch_geometric.loader import DataLoader as GraphLoader

        inputs = GraphLoader(list(inputs), batch_size=batch_size, shuffle=False)
    if isinstance(inputs, Dataset) and not isinstance(inputs, DataLoader):
        inputs = DataLoader(inputs, batch_size=batch_size, shuffle=False)
    if isinstance(inputs, DataLoader):
        try:
            n_batches = len(inputs)
        except TypeError:
            n_batches = None
        return (split_batch(b, input_key, label_key) for b in inputs), n_batches
    raise TypeError(_INPUT_KINDS + f"{type(inputs).__name__}.")


_INPUT_KINDS = (
    "Expected `inputs` to be a tensor or numpy array, a tuple of them, a Dataset, a DataLoader, or a list or Batch "
    "of torch_geometric graphs, but got "
)
