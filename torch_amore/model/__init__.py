"""Running the explained model: inputs, batches, the one forward loop with its layer hook, its outputs' subgroup."""

from torch_amore.model.forward import Forward, ModelArgs, resolve_layer
from torch_amore.model.source import BatchSource, ModelInputs, run_model
from torch_amore.model.subgroups import subgroup_mask

__all__ = ["BatchSource", "Forward", "ModelArgs", "ModelInputs", "resolve_layer", "run_model", "subgroup_mask"]
