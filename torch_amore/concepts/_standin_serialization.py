"""Stand-in JSON form of :class:`~torch_amore.concepts.basis.Directions` (``to_dict`` / ``ConceptBasis.from_dict``)
until the full serialization of every kind of basis replaces it; other kinds are not saved (``to_dict`` raises
``TypeError``). Imported by :mod:`torch_amore.concepts`; it only adds the methods where they are missing."""

from __future__ import annotations

from typing import Any

from torch_amore.concepts.basis import ConceptBasis, Directions

__all__: list[str] = []


def _basis_to_dict(self: ConceptBasis) -> dict[str, Any]:
    raise TypeError(f"Expected a basis that can be saved, but a {type(self).__name__} ({self.kind}) is not yet.")


def _directions_to_dict(self: Directions) -> dict[str, Any]:
    return {
        "kind": "directions",
        "W": self.W.double().tolist(),
        "center": None if self.center is None else self.center.double().tolist(),
        "names": self.names,
    }


def _from_dict(cls: type, data: Any) -> ConceptBasis:
    if not isinstance(data, dict) or data.get("kind") != "directions":
        kind = data.get("kind") if isinstance(data, dict) else type(data).__name__
        raise ValueError(f"Expected a saved concept basis of kind 'directions', but got {kind!r}.")
    return Directions(data["W"], data.get("center"), names=data.get("names"))


if not hasattr(ConceptBasis, "to_dict"):
    ConceptBasis.to_dict = _basis_to_dict  # type: ignore[attr-defined]
    Directions.to_dict = _directions_to_dict  # type: ignore[attr-defined]
if not hasattr(ConceptBasis, "from_dict"):
    ConceptBasis.from_dict = classmethod(_from_dict)  # type: ignore[attr-defined]
