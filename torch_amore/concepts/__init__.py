"""Concept bases of a layer: rules over concept activations ``c = encode(a)`` instead of single units."""

from torch_amore.concepts.basis import ConceptBasis, Directions, EncoderDecoder, reconstruction_error
from torch_amore.concepts.fitted import FITTED_METHODS, FittedBasis
from torch_amore.concepts.sparse_autoencoder import SparseAutoencoderBasis

__all__ = [
    "FITTED_METHODS",
    "ConceptBasis",
    "Directions",
    "EncoderDecoder",
    "FittedBasis",
    "SparseAutoencoderBasis",
    "reconstruction_error",
]
