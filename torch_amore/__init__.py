"""torch_amore: regional IF-THEN rules that explain what makes a trained PyTorch model predict a class.

An implementation of AMORE (Automatic and Model-agnostic Regional Rule Extraction).
"""

import gc
import sys

from torch_amore import integrations
from torch_amore._version import __version__
from torch_amore.experiments.baselines import decision_tree_rules, decision_tree_search
from torch_amore.experiments.protocol import DecisionList, SearchResult, search_hyperparameters, sequential_covering
from torch_amore.explain.attribution import RuleAttribution
from torch_amore.explain.explainer import RegionalRuleExplainer
from torch_amore.explain.explanation import RegionalExplanation
from torch_amore.report import plot
from torch_amore.rules import metrics
from torch_amore.rules.metrics import RuleMetrics, confidence, fitness, rule_metrics, support
from torch_amore.rules.rule import Rule
from torch_amore.rules.rules import RuleSet
from torch_amore.search.extract import extract_rules
from torch_amore.search.options import SearchOptions
from torch_amore.selection.selection import FeatureSelection, select_features
from torch_amore.verify.verification import Verification

# the documented module paths of the flat layout stay importable: ``torch_amore.plot``, ``torch_amore.metrics``
sys.modules[f"{__name__}.plot"] = plot
sys.modules[f"{__name__}.metrics"] = metrics

# What the imports above made (torch's modules, functions and tables: about 170,000 objects) lives as long as the
# process. Frozen, the garbage collector no longer walks it: its first full collection after a large import, due
# within the next few thousand allocations, would otherwise fall into the first or second search of the process (a
# pause of 50-150 ms on that call); later full collections walk only younger objects. One collection first (about
# 70 ms), so that no garbage of the process is frozen with them; `gc.unfreeze()` undoes the freeze.
gc.collect()
gc.freeze()

# torchmetrics and Lightning take seconds to import: integrations/ loads these public names on first use


def __getattr__(name: str):
    if name in integrations.__all__:
        return getattr(integrations, name)
    raise AttributeError(f"module 'torch_amore' has no attribute {name!r}")


__all__ = [
    "DecisionList",
    "FeatureSelection",
    "RegionalExplanation",
    "RegionalRuleClassifier",
    "RegionalRuleExplainer",
    "RegionalRuleExtractor",
    "Rule",
    "RuleAttribution",
    "RuleConfidence",
    "RuleFitness",
    "RuleMetrics",
    "RuleSet",
    "RuleSetMetrics",
    "RuleSupport",
    "SearchOptions",
    "SearchResult",
    "Verification",
    "__version__",
    "confidence",
    "decision_tree_rules",
    "decision_tree_search",
    "extract_rules",
    "fitness",
    "fitness_scorer",
    "rule_metrics",
    "search_hyperparameters",
    "select_features",
    "sequential_covering",
    "support",
]
