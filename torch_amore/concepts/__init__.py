"""Concept bases of a layer: rules over concept activations ``c = encode(a)`` instead of single units."""

from torch_amore.concepts.basis import ConceptBasis, Directions, EncoderDecoder, reconstruction_error
from torch_amore.concepts.fitted import FITTED_METHODS, FittedBasis
from torch_amore.concepts.resolve import CONCEPT_METHODS, resolve_concepts
from torch_amore.concepts.sparse_autoencoder import SparseAutoencoderBasis
from torch_amore.concepts.tcav import from_tcav

__all__ = [
    "CONCEPT_METHODS",
    "FITTED_METHODS",
    "ConceptBasis",
    "Directions",
    "EncoderDecoder",
    "FittedBasis",
    "SparseAutoencoderBasis",
    "from_tcav",
    "reconstruction_error",
    "resolve_concepts",
]
