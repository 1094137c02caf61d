"""The paper's protocol (grid search over hyperparameters, sequential covering) and the decision-tree baselines."""

from torch_amore.experiments.baselines import decision_tree_rules, decision_tree_search
from torch_amore.experiments.decision_list import DecisionList
from torch_amore.experiments.protocol import SearchResult, search_hyperparameters, sequential_covering

__all__ = [
    "DecisionList",
    "SearchResult",
    "decision_tree_rules",
    "decision_tree_search",
    "search_hyperparameters",
    "sequential_covering",
]
