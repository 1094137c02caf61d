"""torch_amore: regional IF-THEN rules that explain what makes a trained PyTorch model predict a class.

An implementation of AMORE (Automatic and Model-agnostic Regional Rule Extraction).
"""

import gc
import importlib
import sys

from torch_amore import integrations
from torch_amore._version import __version__
from torch_amore.rules import metrics
from torch_amore.rules.metrics import RuleMetrics, confidence, fitness, rule_metrics, support
from torch_amore.rules.rule import Rule
from torch_amore.rules.rules import RuleSet
from torch_amore.search.extract import extract_rules
from torch_amore.search.options import SearchOptions

#: Public names whose modules load on first use (the explainer, the experiments' protocol, feature selection and the
#: verification: a tenth of the import, which a search does not need), with the module that defines each.
_LAZY = {
    "DecisionList": "torch_amore.experiments.protocol",
    "FeatureSelection": "torch_amore.selection.selection",
    "RegionalExplanation": "torch_amore.explain.explanation",
    "RegionalRuleExplainer": "torch_amore.explain.explainer",
    "RuleAttribution": "torch_amore.explain.attribution",
    "SearchResult": "torch_amore.experiments.protocol",
    "Verification": "torch_amore.verify.verification",
    "decision_tree_rules": "torch_amore.experiments.baselines",
    "decision_tree_search": "torch_amore.experiments.baselines",
    "search_hyperparameters": "torch_amore.experiments.protocol",
    "select_features": "torch_amore.selection.selection",
    "sequential_covering": "torch_amore.experiments.protocol",
}

# the documented module paths of the flat layout stay importable: ``torch_amore.metrics`` here, ``torch_amore.plot``
# (:mod:`torch_amore.report.plot`) on first use, through ``torch_amore/plot.py``
sys.modules[f"{__name__}.metrics"] = metrics

# Frozen, the objects the imports made (about 170,000, alive for the whole process) are no longer walked by the garbage
# collector, whose first full collection would otherwise fall into an early search (a 50-150 ms pause). The young
# generations are collected first, so that the imports' garbage is not frozen; `gc.unfreeze()` undoes the freeze.
gc.collect(1)
gc.freeze()

# torchmetrics and Lightning take seconds to import: integrations/ loads these public names on first use


def __getattr__(name: str) -> object:
    if name == "plot":
        return importlib.import_module(f"{__name__}.plot")
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # found directly from now on
        return value
    if name in integrations.__all__:
        return getattr(integrations, name)
    raise AttributeError(f"module 'torch_amore' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__) | {"plot"})


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
