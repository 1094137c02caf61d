"""The search strategies, one a file: the paper's rule tree (:mod:`~torch_amore.strategies.tree`), the beam over
fitness-optimal intervals (:mod:`~torch_amore.strategies.beam`, :mod:`~torch_amore.strategies.best_interval`), the
exact optimum on the grid, pair seeding and polishing on observed values."""

from torch_amore.strategies.beam import BeamSearch
from torch_amore.strategies.exact import exact_search
from torch_amore.strategies.exact_cost import estimate_cost
from torch_amore.strategies.polish import polish_many, polish_one
from torch_amore.strategies.seeding import pair_seeds
from torch_amore.strategies.tree import grow_tree

__all__ = ["BeamSearch", "estimate_cost", "exact_search", "grow_tree", "pair_seeds", "polish_many", "polish_one"]
