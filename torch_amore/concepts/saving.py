"""How concept bases travel in JSON: tensors as nested lists of numbers, a user's ``nn.Module`` as its class's import
path and ``state_dict``. Nothing is pickled or evaluated, and loading imports nothing a file names: a saved module's
class is looked up among torch.nn's own module classes (attributes of ``torch.nn``) and the classes the caller passes
(``classes=[MySAE]``); any other class is refused, with a message saying how to pass it.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from torch_amore.data.fields import FieldError, at_path, join

__all__ = [
    "ModuleClasses",
    "ModuleFactories",
    "callable_from_json",
    "callable_to_json",
    "check_keys",
    "class_path",
    "finite_or_none",
    "int_field",
    "module_classes",
    "module_from_json",
    "module_to_json",
    "names_field",
    "number_field",
    "tensor_from_json",
    "tensor_from_list",
    "tensor_to_json",
]

#: what loading may be given for a user's module, by its class's import path (or its index among the saved modules):
#: an instance, or a callable that builds one
ModuleFactories = Mapping[str | int, torch.nn.Module | Callable[[], torch.nn.Module]]
#: the user's ``nn.Module`` classes a saved file may name, each built with no arguments (``classes=[MySAE]``)
ModuleClasses = Iterable[type[torch.nn.Module]]

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
_MAX_DIMS = 32  # numpy's and torch's practical limit; a saved tensor with more is refused


def show(value: Any) -> str:
    """A short repr of ``value`` for a message (a value nested too deeply to repr is named by its type)."""
    try:
        text = repr(value)
    except (RecursionError, ValueError):  # ValueError: an int of more digits than Python converts
        return f"a {type(value).__name__}"
    return text if len(text) <= 80 else text[:77] + "..."


def check_keys(data: Any, keys: Sequence[str], what: str) -> Mapping[str, Any]:
    """``data`` as a dict holding exactly ``keys``, else a :class:`FieldError` naming the first key missing
    (or unexpected) and listing ``keys``; ``what`` names the dict (``"a saved 'pca' basis"``)."""
    if not isinstance(data, Mapping):
        raise FieldError("", f"expected {what} as a dict, but got {type(data).__name__} {show(data)}.")
    for key in keys:
        if key not in data:
            raise FieldError(str(key), f"this required key is missing ({what} has keys {list(keys)}).")
    for key in data:
        if key not in keys:
            raise FieldError(str(key), f"unexpected key ({what} has keys {list(keys)}).")
    return data


def int_field(value: Any, path: str, *, low: int = 0, optional: bool = False) -> int | None:
    """An integer (not a bool or a float) ``>= low`` (or ``None`` when ``optional``), else a
    :class:`FieldError`."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise FieldError(path, f"expected an integer >= {low}, but got {type(value).__name__} {show(value)}.")
    if value < low:
        raise FieldError(path, f"expected an integer >= {low}, but got {value}.")
    return int(value)


def number_field(value: Any, path: str, *, low: float = -math.inf, optional: bool = True) -> float | None:
    """A finite number ``>= low`` (or ``None`` when ``optional``), else a :class:`FieldError`."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise FieldError(path, f"expected a number, but got {type(value).__name__} {show(value)}.")
    try:
        out = float(value)
    except OverflowError:
        raise FieldError(path, f"expected a number within float64 range, but got {show(value)}.") from None
    if not math.isfinite(out) or out < low:
        raise FieldError(path, f"expected a finite number >= {low}, but got {out}.")
    return out


def names_field(value: Any, path: str, count: int | None) -> list[str] | None:
    """``None`` or a list of ``count`` strings (any number when ``count`` is ``None``), else a
    :class:`FieldError`."""
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
        raise FieldError(path, f"expected a list of concept names (strings) or null, but got {show(value)}.")
    if count is not None and len(value) != count:
        raise FieldError(path, f"expected {count} concept names, one per concept, but got {len(value)}.")
    return list(value)


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
    """The torch dtype written as ``name`` by :func:`dtype_name`, else a :class:`FieldError` naming ``where``."""
    if not isinstance(name, str) or name not in _DTYPES:
        raise FieldError(where, f"expected one of {sorted(_DTYPES)}, but got {show(name)}.")
    return _DTYPES[name]


def tensor_from_list(
    values: Any, where: str, dtype: torch.dtype = torch.float64, *, shape: Sequence[int | None] | None = None
) -> torch.Tensor:
    """A tensor of ``dtype`` from nested lists of numbers (of ``shape``, ``None`` for any size along a dimension, when
    given), else a :class:`FieldError` naming ``where``. Integers must fit ``dtype``; booleans make a bool
    tensor only.

    Example:
        >>> tensor_from_list([[1, 2], [3, 4]], "W", torch.float32)
        tensor([[1., 2.],
                [3., 4.]])
        >>> tensor_from_list([1.0, 2.0], "mean", shape=[3])
        Traceback (most recent call last):
        ...
        torch_amore.data.fields.FieldError: Invalid `mean`: expected shape [3], but got [2].
    """
    try:
        array = np.asarray(values)
    except (TypeError, ValueError, OverflowError, RecursionError):
        raise FieldError(
            where, "expected nested lists of numbers, but they do not form an array (rows of different lengths?)."
        ) from None
    if array.size and array.dtype.kind not in _KINDS[_family(dtype)]:
        wanted = {"float": "numbers", "int": "integers within int64", "bool": "true or false values"}[_family(dtype)]
        got = show(values)
        raise FieldError(where, f"expected nested lists of {wanted} ({dtype_name(dtype)}), but got {got}.")
    if shape is not None and (
        len(shape) != array.ndim or any(want is not None and want != got for want, got in zip(shape, array.shape))
    ):
        want = [("any" if s is None else s) for s in shape]
        raise FieldError(where, f"expected shape {want}, but got {list(array.shape)}.")
    if _family(dtype) == "int" and array.size:
        info = torch.iinfo(dtype)
        low, high = array.min(), array.max()
        if low < info.min or high > info.max:
            raise FieldError(where, f"expected integers in [{info.min}, {info.max}] ({dtype_name(dtype)}).")
        array = array.astype(np.int64)
    elif _family(dtype) == "float":
        array = array.astype(np.float64)
    return torch.as_tensor(array).to(dtype)


_KINDS = {"float": "iuf", "int": "iu", "bool": "b"}


def _family(dtype: torch.dtype) -> str:
    return "float" if dtype.is_floating_point else "bool" if dtype == torch.bool else "int"


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
    """The tensor :func:`tensor_to_json` wrote, else a :class:`FieldError` naming ``where``: the ``shape`` is
    checked against the numbers given before anything of its size is made.

    Example:
        >>> tensor_from_json(tensor_to_json(torch.arange(3)), "steps")
        tensor([0, 1, 2])
        >>> tensor_from_json({"dtype": "float32", "shape": [2**32, 2**32], "data": [[1.0]]}, "W")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        torch_amore.data.fields.FieldError: Invalid `W.data`: expected 18446744073709551616 numbers ...
    """
    with at_path(where):
        check_keys(data, ("dtype", "shape", "data"), "a saved tensor")
    dtype = dtype_from_name(data["dtype"], join(where, "dtype"))
    shape = data["shape"]
    if (
        not isinstance(shape, list)
        or len(shape) > _MAX_DIMS
        or not all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s < 2**63 for s in shape)
    ):
        raise FieldError(
            join(where, "shape"), f"expected a list of at most {_MAX_DIMS} integers >= 0, but got {show(shape)}."
        )
    count, values = math.prod(shape), data["data"]
    # the numbers given must be those of the shape: a hostile shape is refused before any tensor of its size is made
    outer = len(values) if isinstance(values, list) else None
    if (outer is None) != (not shape) or (shape and outer != shape[0]):
        got = "a single value" if outer is None else f"a list of {outer}"
        raise FieldError(join(where, "data"), f"expected {count} numbers of shape {shape}, but got {got}.")
    tensor = tensor_from_list(values, join(where, "data"), dtype)
    if count == 0 and tensor.numel() == 0:
        return tensor.reshape(shape)
    if list(tensor.shape) != shape:
        raise FieldError(
            join(where, "data"),
            f"expected {count} numbers of shape {shape}, but got {tensor.numel()} of shape {list(tensor.shape)}.",
        )
    return tensor


def class_path(cls: type) -> str:
    """``"package.module.Class"``: how a saved module names its class (:func:`module_to_json`)."""
    return f"{cls.__module__}.{cls.__qualname__}"


def module_classes(classes: ModuleClasses | None) -> dict[str, type[torch.nn.Module]]:
    """The classes a caller lets a saved file name, by :func:`class_path`; a TypeError for anything but a list of
    ``nn.Module`` classes.

    Example:
        >>> module_classes([torch.nn.Linear])
        {'torch.nn.modules.linear.Linear': <class 'torch.nn.modules.linear.Linear'>}
    """
    if classes is None:
        return {}
    if isinstance(classes, type | str | Mapping):
        raise TypeError(f"Expected `classes` to be a list of nn.Module classes, but got {show(classes)}.")
    out: dict[str, type[torch.nn.Module]] = {}
    for cls in classes:
        if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)):
            raise TypeError(f"Expected `classes` to hold nn.Module classes, but got {show(cls)}.")
        out[class_path(cls)] = cls
    return out


def module_to_json(module: torch.nn.Module, role: str) -> dict[str, Any]:
    """``{"module", "class", "training", "state_dict"}``: an ``nn.Module`` as the import path of its class and its
    state (tensors as :func:`tensor_to_json`); a ValueError when the class is not found by that path (a class defined
    inside a function). Loading finds the class among torch.nn's and the classes it is given (:func:`module_from_json`).

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
            "can be named by its path when loaded; define it there, or save the explanation without the basis."
        )
    found: Any = sys.modules.get(path)  # the class's own module, imported already: nothing is imported here
    for part in qualname.split("."):
        found = getattr(found, part, None)
    if found is not cls:
        raise ValueError(
            f"The `{role}` module's class {path}.{qualname} is not found by that path; it cannot be saved."
        )
    state = {name: tensor_to_json(value) for name, value in module.state_dict().items()}
    return {"module": path, "class": qualname, "training": bool(module.training), "state_dict": state}


def module_from_json(
    data: Any,
    where: str,
    modules: ModuleFactories | None = None,
    index: int | None = None,
    classes: Mapping[str, type[torch.nn.Module]] | None = None,
) -> torch.nn.Module:
    """The module :func:`module_to_json` wrote, given its saved ``state_dict``: ``modules[index]`` or
    ``modules[path]`` when given (an instance, or a callable that builds one), else its class built with no
    arguments. Nothing is imported: the class is one of ``classes`` (from :func:`module_classes`; by its path, else
    by its name when one class has it) or one of torch.nn's own module classes; any other is a
    :class:`FieldError` saying how to pass it. Every field is checked before anything is built.

    Example:
        >>> linear = torch.nn.Linear(2, 1)
        >>> again = module_from_json(module_to_json(linear, "encode"), "encode",
        ...                          modules={"torch.nn.modules.linear.Linear": lambda: torch.nn.Linear(2, 1)})
        >>> torch.equal(again.weight, linear.weight)
        True
        >>> saved = {"module": "this", "class": "X", "training": False, "state_dict": {}}  # `this` is not imported
        >>> module_from_json(saved, "modules[0]")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        torch_amore.data.fields.FieldError: Invalid `modules[0].class`: this.X is not one of torch.nn's ...
    """
    with at_path(where):
        check_keys(data, ("module", "class", "training", "state_dict"), "a saved module")
    path, qualname, training, state = data["module"], data["class"], data["training"], data["state_dict"]
    if not isinstance(path, str) or not _DOTTED.fullmatch(path):
        raise FieldError(join(where, "module"), f"expected a dotted module path, but got {show(path)}.")
    if not isinstance(qualname, str) or not _DOTTED.fullmatch(qualname):
        raise FieldError(join(where, "class"), f"expected a class name, but got {show(qualname)}.")
    if not isinstance(training, bool):
        raise FieldError(join(where, "training"), f"expected true or false, but got {show(training)}.")
    if not isinstance(state, Mapping):
        raise FieldError(join(where, "state_dict"), f"expected a dict of saved tensors, but got {show(state)}.")
    tensors = {str(k): tensor_from_json(v, join(where, f"state_dict.{k}")) for k, v in state.items()}
    full = f"{path}.{qualname}"
    modules = modules or {}
    given = modules.get(index) if index is not None and index in modules else modules.get(full)
    if given is not None:
        module = given if isinstance(given, torch.nn.Module) else given()
        if not isinstance(module, torch.nn.Module):
            raise TypeError(f"Expected `modules[{full!r}]` to be an nn.Module or build one, but got {type(module)}.")
    else:
        module = _build(_module_class(path, qualname, join(where, "class"), classes or {}), full, join(where, "class"))
    try:
        module.load_state_dict(tensors)
    except RuntimeError as err:
        raise FieldError(join(where, "state_dict"), f"the saved state does not fit a new {full}: {err}") from None
    return module.train(training)


def _module_class(
    path: str, qualname: str, where: str, classes: Mapping[str, type[torch.nn.Module]]
) -> type[torch.nn.Module]:
    """The class a saved module names, found without importing anything: one of ``classes`` (by its full path, else
    by its name when exactly one of them has it) or one of torch.nn's own module classes."""
    full = f"{path}.{qualname}"
    if full in classes:
        return classes[full]
    same_name = [cls for cls in classes.values() if cls.__qualname__ == qualname]
    if len(same_name) == 1:  # e.g. saved from a script (``__main__.MySAE``), loaded where it is imported
        return same_name[0]
    if (path == "torch.nn" or path.startswith("torch.nn.")) and "." not in qualname and not qualname.startswith("_"):
        found = getattr(torch.nn, qualname, None)  # an attribute of torch.nn, which is imported already
        if isinstance(found, type) and issubclass(found, torch.nn.Module) and found.__module__ == path:
            return found
    name = qualname.rsplit(".", 1)[-1]
    hint = f"two of the classes given are named {qualname}; " if same_name else ""
    raise FieldError(
        where,
        f"{full} is not one of torch.nn's module classes nor of the `classes` given, and loading imports nothing a "
        f"file names: {hint}pass the class, `classes=[{name}]` (built with no arguments), or an instance, "
        f"`modules={{{full!r}: instance}}`.",
    )


def _build(cls: type[torch.nn.Module], full: str, where: str) -> torch.nn.Module:
    """A new instance of ``cls``, built with no arguments."""
    try:
        return cls()
    except TypeError as err:
        raise FieldError(
            where,
            f"{full} cannot be built without arguments ({err}); pass `modules={{{full!r}: module}}` with an instance "
            "(or a function that builds one).",
        ) from None


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
    """The module (or its public method) that :func:`callable_to_json` wrote; a :class:`FieldError` naming
    ``role`` otherwise."""
    with at_path(role):
        check_keys(spec, ("module", "method"), f"a saved `{role}`")
    index, method = spec["module"], spec["method"]
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(modules):
        raise FieldError(
            join(role, "module"), f"expected an index into the {len(modules)} saved modules, but got {show(index)}."
        )
    if method is None:
        return modules[index]
    if not isinstance(method, str) or not method.isidentifier() or method.startswith("_"):
        raise FieldError(join(role, "method"), f"expected a public method name or null, but got {show(method)}.")
    found = getattr(modules[index], method, None)
    if not callable(found):
        raise FieldError(
            join(role, "method"), f"{type(modules[index]).__name__}.{method} is not a method of the saved module."
        )
    return found
