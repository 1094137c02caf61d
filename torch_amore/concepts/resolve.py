"""``concepts=`` as the explainer takes it, resolved once into a :class:`~torch_amore.concepts.basis.ConceptBasis`.

A minimal version: ``None``, a :class:`~torch_amore.concepts.basis.ConceptBasis`, a (D, K) matrix of directions
(tensor or array) or a ``(W, center)`` pair. The fitted methods (``"pca"``, ``"nmf"``, ``"ica"``, ``"sae"``) are
named, and refused, until their module is present.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from torch_amore.concepts.basis import ConceptBasis, Directions

__all__ = ["FITTED_METHODS", "resolve_concepts"]

#: The names of the bases fitted on the explained activations.
FITTED_METHODS = ("pca", "nmf", "ica", "sae")


def resolve_concepts(
    concepts: Any, *, n_concepts: int | None = None, seed: int = 0, names: Sequence[str] | None = None
) -> ConceptBasis | None:
    """The concept basis ``concepts`` describes (``None`` for none).

    Args:
        concepts: ``None``, a :class:`ConceptBasis`, a (D, K) tensor or array ``W`` or a ``(W, center)`` pair.
        n_concepts: K of a fitted method (refused for the other kinds).
        seed: the seed of a fitted method.
        names: the K concept names of a matrix of directions.

    Example:
        >>> import torch
        >>> resolve_concepts(torch.eye(3)[:, :2], names=["a", "b"])
        Directions(kind='directions', n_concepts=2)
        >>> resolve_concepts(None) is None
        True
    """
    if concepts is None:
        if n_concepts is not None:
            raise ValueError("Expected `n_concepts` only with a fitted `concepts` method, but `concepts` is None.")
        return None
    if isinstance(concepts, str):
        if concepts in FITTED_METHODS:
            raise ValueError(f"Expected `concepts` a basis or directions: {concepts!r} is not available in this build.")
        raise ValueError(f"Expected `concepts` to be one of {list(FITTED_METHODS)} or a basis, but got {concepts!r}.")
    if n_concepts is not None:
        raise ValueError(
            f"Expected `n_concepts` only with a fitted method ({', '.join(FITTED_METHODS)}), but `concepts` is a "
            f"{type(concepts).__name__} whose K is given."
        )
    if isinstance(concepts, ConceptBasis):
        if names is not None:
            raise ValueError("Expected the concept names in the given ConceptBasis, not as `names` too.")
        return concepts
    if isinstance(concepts, tuple) and len(concepts) == 2:
        return Directions(concepts[0], concepts[1], names=names)
    if isinstance(concepts, (torch.Tensor, np.ndarray)):
        return Directions(concepts, names=names)
    raise TypeError(
        "Expected `concepts` to be a ConceptBasis, a (D, K) tensor or array of directions, a (W, center) pair or a "
        f"method name, but got {type(concepts).__name__}."
    )
