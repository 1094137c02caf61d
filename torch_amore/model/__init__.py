"""Running the explained model: inputs, batches, forward hooks on a layer (:mod:`~torch_amore.model.forward`), the
subgroup of its outputs (:mod:`~torch_amore.model.subgroups`); a LightningModule's batches live in
:mod:`~torch_amore.model.lightning_batches` (imported on use: it loads Lightning)."""

from torch_amore.model.forward import Forward, ModelArgs, resolve_layer, run_model
from torch_amore.model.subgroups import subgroup, subgroup_mask

__all__ = ["Forward", "ModelArgs", "resolve_layer", "run_model", "subgroup", "subgroup_mask"]
