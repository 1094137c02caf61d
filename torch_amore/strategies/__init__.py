"""The search strategies, one a file: the paper's rule tree (:mod:`~torch_amore.strategies.tree` over the candidate
intervals of :mod:`~torch_amore.strategies.intervals`), the beam, the exact optimum, pair seeding, polishing on
observed values and pruning by ``min_gain``."""

from torch_amore.strategies.beam import BeamSearch
from torch_amore.strategies.exact import estimate_cost, exact_search
from torch_amore.strategies.intervals import candidate_intervals
from torch_amore.strategies.polish import polish_many, polish_one
from torch_amore.strategies.pruning import prune_rule_sets
from torch_amore.strategies.seeding import pair_seeds
from torch_amore.strategies.tree import grow_tree

__all__ = [
    "BeamSearch",
    "candidate_intervals",
    "estimate_cost",
    "exact_search",
    "grow_tree",
    "pair_seeds",
    "polish_many",
    "polish_one",
    "prune_rule_sets",
]
