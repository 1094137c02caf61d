"""Concept directions from Captum's TCAV: the concept activation vectors (CAVs) of one layer as a :class:`Directions`
basis. The CAV of an experimental set is its first concept's row of the set's linear classifier: the normal of the
boundary, pointing from the counter examples towards the concept.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from torch_amore.concepts.basis import Directions
from torch_amore.data.arguments import did_you_mean

__all__ = ["from_tcav"]


def from_tcav(
    tcav: Any,
    experimental_sets: Sequence[Sequence[Any]] | None = None,
    layer: str | None = None,
    *,
    names: Sequence[str] | None = None,
    normalize: bool = True,
) -> Directions:
    """A :class:`Directions` basis of one layer from the CAVs of a Captum ``TCAV``, one concept per experimental set.

    Args:
        tcav: a ``captum.concept.TCAV`` for the explained model; CAVs it lacks are computed by its ``compute_cavs``.
        experimental_sets: lists of ``Concept`` s as given to ``TCAV.compute_cavs``, the concept first, then its
            counter concepts: one direction each (default: every set whose CAVs ``tcav`` holds for ``layer``).
        layer: the layer's name among ``tcav.layers`` (default: its only layer).
        names: the concept names (default: each set's first ``Concept.name``; ``name-vs-counter`` when a concept
            comes in several sets).
        normalize: scale each CAV to unit length (default); ``False`` keeps the classifier's weights.

    Returns:
        The (D, K) directions, K the number of sets, named after the concepts.

    Example:
        >>> import tempfile, warnings, torch
        >>> from captum.concept import TCAV, Concept
        >>> _ = torch.manual_seed(0)
        >>> model = torch.nn.Sequential()
        >>> model.add_module("hidden", torch.nn.Linear(2, 2)); model.add_module("head", torch.nn.Linear(2, 1))
        >>> with torch.no_grad():
        ...     _ = model.hidden.weight.copy_(torch.eye(2)), model.hidden.bias.zero_()
        >>> stripes = Concept(0, "stripes", [torch.randn(40, 2) + torch.tensor([3.0, 0.0])])
        >>> random = Concept(1, "random", [torch.randn(40, 2)])
        >>> with tempfile.TemporaryDirectory() as path, warnings.catch_warnings():
        ...     warnings.simplefilter("ignore")
        ...     basis = from_tcav(TCAV(model, ["hidden"], save_path=path), [[stripes, random]])
        >>> basis.names, basis.W[:, 0].argmax().item()   # towards the stripes: along the first unit
        (['stripes'], 0)
    """
    layer = _resolve_layer(tcav, layer)
    if experimental_sets is None:
        computed = [by_layer[layer] for by_layer in tcav.cavs.values() if by_layer and by_layer.get(layer) is not None]
        sets = [list(cav.concepts) for cav in computed]  # in the order computed
        if not sets:
            raise ValueError(
                f"The TCAV holds no CAVs for layer {layer!r}: pass the `experimental_sets` to compute them, or call "
                "`tcav.compute_cavs(experimental_sets)` first."
            )
    else:
        sets = _check_sets(experimental_sets)
    missing = [s for s in sets if _cav(tcav, s, layer) is None]
    if missing:
        tcav.compute_cavs(missing)
    columns = [_direction(_cav(tcav, s, layer), s[0], layer) for s in sets]
    W = torch.stack(columns, dim=1)
    if normalize:
        W = W / W.norm(dim=0, keepdim=True).clamp_min(torch.finfo(W.dtype).tiny)
    return Directions(W, names=_names(sets) if names is None else names)


def _resolve_layer(tcav: Any, layer: str | None) -> str:
    """The layer's name, checked against ``tcav.layers``."""
    if not hasattr(tcav, "cavs") or not hasattr(tcav, "layers") or not hasattr(tcav, "compute_cavs"):
        raise TypeError(f"Expected `tcav` to be a captum.concept.TCAV, but got {type(tcav).__name__}.")
    layers = list(tcav.layers)
    if layer is None:
        if len(layers) != 1:
            raise ValueError(f"The TCAV has the layers {layers}: name one with `layer=`.")
        return layers[0]
    if layer not in layers:
        raise ValueError(
            f"Expected `layer` to be one of the TCAV's layers {layers}, but got {layer!r}{did_you_mean(layer, layers)}."
        )
    return layer


def _check_sets(experimental_sets: Any) -> list[list[Any]]:
    """The sets as lists, each of at least two concepts with an ``id`` and a ``name``."""
    if isinstance(experimental_sets, (str, bytes)) or not isinstance(experimental_sets, Sequence):
        raise TypeError("Expected `experimental_sets` to be a list of lists of captum Concepts.")
    sets = []
    for i, concepts in enumerate(experimental_sets):
        if not isinstance(concepts, Sequence) or len(concepts) < 2:
            raise ValueError(
                f"Expected `experimental_sets[{i}]` to be a list of at least two Concepts (the concept, then its "
                f"counter examples), but got {concepts!r}."
            )
        if not all(hasattr(c, "id") and hasattr(c, "name") for c in concepts):
            raise TypeError(f"Expected `experimental_sets[{i}]` to hold captum Concepts.")
        sets.append(list(concepts))
    if not sets:
        raise ValueError("Expected at least one experimental set.")
    return sets


def _key(concepts: Sequence[Any]) -> str:
    """Captum's key of an experimental set (``concepts_to_str``): the concept ids joined by ``-``."""
    return "-".join(str(c.id) for c in concepts)


def _cav(tcav: Any, concepts: Sequence[Any], layer: str) -> Any:
    """The CAV that ``tcav`` holds for the set at the layer, else None."""
    by_layer = tcav.cavs.get(_key(concepts)) if hasattr(tcav.cavs, "get") else None
    cav = None if not by_layer else by_layer.get(layer)
    return cav if cav is not None and getattr(cav, "stats", None) else None


def _direction(cav: Any, concept: Any, layer: str) -> torch.Tensor:
    """The weights row of ``concept`` in the CAV's classifier (float64, on the CPU)."""
    weights = torch.as_tensor(cav.stats["weights"]).detach().cpu().double()
    classes = [int(c) if not isinstance(c, str) else c for c in list(cav.stats["classes"])]
    if concept.id not in classes:
        raise ValueError(
            f"The CAV of {concept.name!r} at layer {layer!r} has no weights for its class (classes {classes})."
        )
    return weights.reshape(weights.shape[0], -1)[classes.index(concept.id)]


def _names(sets: list[list[Any]]) -> list[str]:
    """Each set's first concept's name; ``name-vs-counter`` where a concept comes in several sets."""
    firsts = [str(s[0].name) for s in sets]
    return [
        name if firsts.count(name) == 1 else f"{name}-vs-{'-'.join(str(c.name) for c in s[1:])}"
        for name, s in zip(firsts, sets)
    ]
