"""Every public name has its own docstring, and so has every public member its class defines: the API reference
(docs/reference/) is rendered from them, and autodoc leaves out a member without one."""

from __future__ import annotations

import importlib
import inspect

import pytest

import torch_amore

# the package root's names, and the module paths the reference documents beside them
PUBLIC_MODULES = ("torch_amore", "torch_amore.plot", "torch_amore.report", "torch_amore.cli")


def public_names() -> list[tuple[str, str]]:
    names = []
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        names += [(module_name, n) for n in module.__all__ if n != "__version__"]
    return names


def own_doc(obj: object) -> str:
    """The object's own docstring: not inherited, and not the ``Name(field, ...)`` line that dataclasses and named
    tuples make up when a class has none."""
    doc = (obj.__dict__.get("__doc__") if inspect.isclass(obj) else getattr(obj, "__doc__", None)) or ""
    name = getattr(obj, "__name__", "")
    return "" if doc.startswith(f"{name}(") else doc.strip()


def test_the_public_names_are_the_documented_ones():
    assert len(public_names()) == len(set(public_names())) >= len(torch_amore.__all__) - 1
    assert "RegionalRuleExplainer" in torch_amore.__all__ and "__version__" in torch_amore.__all__


@pytest.mark.parametrize(("module_name", "name"), public_names(), ids=lambda v: v)
def test_public_name_has_a_docstring(module_name, name):
    obj = getattr(importlib.import_module(module_name), name)
    assert own_doc(obj), f"{module_name}.{name} has no docstring of its own"


def _overrides(cls: type, name: str) -> bool:
    """Whether ``name`` overrides a base class's member (a Lightning hook, ``Metric.compute``), documented there."""
    return any(name in vars(base) for base in cls.__mro__[1:] if base is not object)


def public_members() -> list[tuple[str, str]]:
    members = []
    for module_name, name in public_names():
        cls = getattr(importlib.import_module(module_name), name)
        if not inspect.isclass(cls):
            continue
        for member, value in vars(cls).items():
            is_member = isinstance(value, property | classmethod | staticmethod) or inspect.isfunction(value)
            if is_member and not member.startswith("_") and not _overrides(cls, member):
                members.append((f"{module_name}.{name}", member))
    return members


def test_classes_define_public_members():
    classes = {owner for owner, _ in public_members()}
    assert {"torch_amore.RuleSet", "torch_amore.RegionalExplanation", "torch_amore.DecisionList"} <= classes


@pytest.mark.parametrize(("owner", "member"), public_members(), ids=lambda v: v)
def test_public_member_has_a_docstring(owner, member):
    module_name, name = owner.rsplit(".", 1)
    value = vars(getattr(importlib.import_module(module_name), name))[member]
    function = value.fget if isinstance(value, property) else getattr(value, "__func__", value)
    assert (function.__doc__ or "").strip(), f"{owner}.{member} has no docstring"
