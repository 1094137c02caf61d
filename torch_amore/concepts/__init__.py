"""Concept bases of a layer: rules over concept activations ``c = encode(a)`` instead of single units."""

from torch_amore.concepts.basis import ConceptBasis, Directions, EncoderDecoder

__all__ = ["ConceptBasis", "Directions", "EncoderDecoder"]
