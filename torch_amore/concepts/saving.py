"""How concept bases travel in JSON: tensors as nested lists of numbers, a user's ``nn.Module`` as its import path
and ``state_dict``; nothing is pickled or evaluated, and loading imports only a dotted path to an ``nn.Module`` class.
"""

from __future__ import annotations

import importlib
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

__all__ = [
    "ModuleFactories",
    "finite_or_none",
    "callable_from_json",
    "callable_to_json",
    "module_from_json",
    "module_to_json",
    "tensor_from_json",
    "tensor_from_list",
    "tensor_to_json",
]

#: what loading may be given for a user's module, by its class's import path (or its index among the saved modules):
#: an instance, or a callable that builds one
ModuleFactories = Mapping[str | int, torch.nn.Module | Callable[[], torch.nn.Module]]

# the dtypes a saved tensor may name (a saved file never names an arbitrary attribute of torch)
_DTYPES = {
    str(dtype).removeprefix("torch."): dtype
    for dtype in (
        torch.float16,
        torch.bfloat16,
        torch.float32,
        torch.float64,
        torch.int8,
        torch.uint8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.bool,
    )
}
_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


def finite_or_none(value: float | None) -> float | None:
    """``value`` as a float, or ``None`` when it is ``None`` or not finite (JSON holds no infinity).

    Example:
        >>> finite_or_none(0.25), finite_or_none(float("inf"))
        (0.25, None)
    """
    return None if value is None or not math.isfinite(value) else float(value)


def dtype_name(dtype: torch.dtype) -> str:
    """``"float32"`` for ``torch.float32``: how a dtype is written in JSON."""
    return str(dtype).removeprefix("torch.")


def dtype_from_name(name: Any, where: str = "dtype") -> torch.dtype:
    """The torch dtype written as ``name`` by :func:`dtype_name`, else a ValueError naming ``where``."""
    if name not in _DTYPES:
        raise ValueError(f"Expected `{where}` to be one of {sorted(_DTYPES)}, but got {name!r}.")
    return _DTYPES[name]


def tensor_from_list(values: Any, where: str, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """A tensor of ``dtype`` from nested lists of numbers, else a ValueError naming ``where``.

    Example:
        >>> tensor_from_list([[1, 2], [3, 4]], "W", torch.float32)
        tensor([[1., 2.],
                [3., 4.]])
    """
    try:
        array = np.asarray(values, dtype=np.float64 if dtype.is_floating_point else None)
    except (TypeError, ValueError) as err:
        raise ValueError(f"Expected `{where}` to be nested lists of numbers, but they do not form an array.") from err
    if array.dtype == object or not (np.issubdtype(array.dtype, np.number) or array.dtype == np.bool_):
        raise ValueError(f"Expected `{where}` to be nested lists of numbers, but got {type(values).__name__}.")
    return torch.as_tensor(array).to(dtype)


def tensor_to_json(tensor: torch.Tensor) -> dict[str, Any]:
    """``{"dtype", "shape", "data"}``: a tensor as numbers only (``data`` nested lists, exact for every dtype listed).

    Example:
        >>> tensor_to_json(torch.tensor([[1.5, 2.0]]))
        {'dtype': 'float32', 'shape': [1, 2], 'data': [[1.5, 2.0]]}
    """
    t = tensor.detach().cpu()
    if t.dtype not in _DTYPES.values():
        raise ValueError(f"A tensor of dtype {t.dtype} cannot be saved as numbers; expected one of {sorted(_DTYPES)}.")
    data = t.double() if t.dtype in (torch.float16, torch.bfloat16) else t
    return {"dtype": dtype_name(t.dtype), "shape": list(t.shape), "data": data.tolist()}


def tensor_from_json(data: Any, where: str) -> torch.Tensor:
    """The tensor :func:`tensor_to_json` wrote, else a ValueError naming ``where``.

    Example:
        >>> tensor_from_json(tensor_to_json(torch.arange(3)), "steps")
        tensor([0, 1, 2])
    """
    if not isinstance(data, Mapping) or set(data) != {"dtype", "shape", "data"}:
        raise ValueError(f"Expected `{where}` to be a dict with keys 'dtype', 'shape' and 'data'.")
    dtype = dtype_from_name(data["dtype"], f"{where}.dtype")
    shape = data["shape"]
    if not isinstance(shape, list) or not all(isinstance(s, int) and not isinstance(s, bool) for s in shape):
        raise ValueError(f"Expected `{where}.shape` to be a list of integers, but got {shape!r}.")
    tensor = tensor_from_list(data["data"], f"{where}.data", dtype)
    if tensor.numel() != int(np.prod(shape)):
        raise ValueError(
            f"Expected `{where}.data` to hold {int(np.prod(shape))} numbers, but it holds {tensor.numel()}."
        )
    return tensor.reshape(shape)


def module_to_json(module: torch.nn.Module, role: str) -> dict[str, Any]:
    """``{"module", "class", "training", "state_dict"}``: an ``nn.Module`` as the import path of its class and its
    state (tensors as :func:`tensor_to_json`); a ValueError when the class cannot be imported back by that path.

    Example:
        >>> saved = module_to_json(torch.nn.Linear(2, 1), "encode")
        >>> saved["module"], saved["class"], sorted(saved["state_dict"])
        ('torch.nn.modules.linear', 'Linear', ['bias', 'weight'])
    """
    cls = type(module)
    path, qualname = cls.__module__, cls.__qualname__
    if "<locals>" in qualname or "<lambda>" in qualname:
        raise ValueError(
            f"Expected the `{role}` module's class {qualname} to be defined at the top level of a module, so that it "
            "can be imported by its path when loaded; define it there, or save the explanation without the basis."
        )
    try:
        found = _import_attribute(path, qualname)
    except (ImportError, AttributeError):
        found = None
    if found is not cls:
        raise ValueError(
            f"The `{role}` module's class {path}.{qualname} does not import by that path; it cannot be saved."
        )
    state = {name: tensor_to_json(value) for name, value in module.state_dict().items()}
    return {"module": path, "class": qualname, "training": bool(module.training), "state_dict": state}


def module_from_json(
    data: Any, where: str, modules: ModuleFactories | None = None, index: int | None = None
) -> torch.nn.Module:
    """The module :func:`module_to_json` wrote: its class imported by the dotted path and built with no arguments (or
    taken from ``modules[index]`` or ``modules[path]``), given the saved ``state_dict``.

    Example:
        >>> linear = torch.nn.Linear(2, 1)
        >>> again = module_from_json(module_to_json(linear, "encode"), "encode",
        ...                          modules={"torch.nn.modules.linear.Linear": lambda: torch.nn.Linear(2, 1)})
        >>> torch.equal(again.weight, linear.weight)
        True
    """
    if not isinstance(data, Mapping) or set(data) != {"module", "class", "training", "state_dict"}:
        raise ValueError(f"Expected `{where}` to be a dict with keys 'module', 'class', 'training' and 'state_dict'.")
    path, qualname = data["module"], data["class"]
    if not isinstance(path, str) or not isinstance(qualname, str) or not _DOTTED.fullmatch(f"{path}.{qualname}"):
        raise ValueError(
            f"Expected `{where}` to name a module and class as a dotted path, but got {path!r}, {qualname!r}."
        )
    full = f"{path}.{qualname}"
    modules = modules or {}
    given = modules.get(index) if index is not None and index in modules else modules.get(full)
    if given is not None:
        module = given if isinstance(given, torch.nn.Module) else given()
        if not isinstance(module, torch.nn.Module):
            raise TypeError(f"Expected `modules[{full!r}]` to be an nn.Module or build one, but got {type(module)}.")
    else:
        module = _build(full, path, qualname, where)
    state = data["state_dict"]
    if not isinstance(state, Mapping):
        raise ValueError(f"Expected `{where}.state_dict` to be a dict of tensors.")
    tensors = {str(k): tensor_from_json(v, f"{where}.state_dict.{k}") for k, v in state.items()}
    try:
        module.load_state_dict(tensors)
    except RuntimeError as err:
        raise ValueError(f"The saved state of `{where}` does not fit a new {full}: {err}") from err
    return module.train(bool(data["training"]))


def _build(full: str, path: str, qualname: str, where: str) -> torch.nn.Module:
    """A new instance of the class at ``path.qualname``, built with no arguments."""
    try:
        cls = _import_attribute(path, qualname)
    except (ImportError, AttributeError) as err:
        raise ValueError(
            f"The `{where}` module's class {full} does not import here ({type(err).__name__}: {err}); install or put "
            "on the path the package that defines it, or pass `modules={" + repr(full) + ": module}`."
        ) from err
    if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)):
        raise ValueError(f"Expected `{where}` to name an nn.Module class, but {full} is {type(cls).__name__}.")
    try:
        return cls()
    except TypeError as err:
        raise ValueError(
            f"The `{where}` module's class {full} cannot be built without arguments ({err}); pass "
            "`modules={" + repr(full) + ": module}` with an instance (or a function that builds one)."
        ) from err


def _import_attribute(path: str, qualname: str) -> Any:
    """The attribute ``qualname`` (dotted) of the module imported by ``path``."""
    found: Any = importlib.import_module(path)
    for part in qualname.split("."):
        found = getattr(found, part)
    return found


def callable_to_json(fn: Callable[..., Any], role: str, modules: list[torch.nn.Module]) -> dict[str, Any]:
    """``{"module": index into modules, "method": name or None}`` for an nn.Module or a public method of one
    (the module appended to ``modules`` when not there yet); a ValueError for anything else (a function, a lambda)."""
    owner, method = (fn, None) if isinstance(fn, torch.nn.Module) else (getattr(fn, "__self__", None), None)
    if not isinstance(fn, torch.nn.Module) and isinstance(owner, torch.nn.Module):
        method = getattr(getattr(fn, "__func__", None), "__name__", None)
        bound = getattr(owner, method, None) if isinstance(method, str) and not method.startswith("_") else None
        if getattr(bound, "__func__", None) is not getattr(fn, "__func__", None):
            owner = None
    if not isinstance(owner, torch.nn.Module):
        qualname = getattr(fn, "__qualname__", None)
        label = f"a {type(fn).__name__}, {qualname}" if qualname else f"a {type(fn).__name__} object"
        raise ValueError(
            f"The concept basis's `{role}` ({label}) cannot be saved: only an nn.Module or a method of one is saved "
            "(as its class's import path and state_dict). Wrap it in an nn.Module defined at the top level of a module."
        )
    index = next((i for i, m in enumerate(modules) if m is owner), None)
    if index is None:
        modules.append(owner)
        index = len(modules) - 1
    return {"module": index, "method": method}


def callable_from_json(spec: Any, role: str, modules: list[torch.nn.Module]) -> Callable[..., Any]:
    """The module (or its public method) that :func:`callable_to_json` wrote."""
    if not isinstance(spec, Mapping) or set(spec) != {"module", "method"}:
        raise ValueError(f"Expected `{role}` to be a dict with keys 'module' and 'method'.")
    index, method = spec["module"], spec["method"]
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(modules):
        raise ValueError(f"Expected `{role}.module` to index the {len(modules)} saved modules, but got {index!r}.")
    if method is None:
        return modules[index]
    if not isinstance(method, str) or not method.isidentifier() or method.startswith("_"):
        raise ValueError(f"Expected `{role}.method` to be a public method name or None, but got {method!r}.")
    found = getattr(modules[index], method, None)
    if not callable(found):
        raise ValueError(f"The saved `{role}` names {type(modules[index]).__name__}.{method}, which is not a method.")
    return found
