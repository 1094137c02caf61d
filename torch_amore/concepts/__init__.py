"""Concept bases of a layer: rules over concept activations ``c = encode(a)`` instead of single units."""

from torch_amore.concepts import _standin_serialization  # noqa: F401  (to_dict/from_dict until the full version)
from torch_amore.concepts.basis import ConceptBasis, Directions, EncoderDecoder
from torch_amore.concepts.resolve import resolve_concepts

__all__ = ["ConceptBasis", "Directions", "EncoderDecoder", "resolve_concepts"]
