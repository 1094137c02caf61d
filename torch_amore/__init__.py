"""torch_amore: regional IF-THEN rules that explain what makes a trained PyTorch model predict a class.

An implementation of AMORE (Automatic and Model-agnostic Regional Rule Extraction).
"""

from torch_amore.attribution import RuleAttribution
from torch_amore.baselines import decision_tree_rules, decision_tree_search
from torch_amore.explainer import RegionalRuleExplainer
from torch_amore.explanation import RegionalExplanation
from torch_amore.metrics import RuleMetrics, confidence, fitness, rule_metrics, support
from torch_amore.options import SearchOptions
from torch_amore.protocol import DecisionList, SearchResult, search_hyperparameters, sequential_covering
from torch_amore.rules import Rule, RuleSet
from torch_amore.search import extract_rules
from torch_amore.selection import FeatureSelection, select_features
from torch_amore.verification import Verification

__version__ = "0.1.0"

# torchmetrics and Lightning take seconds to import: these public names load on first use
_LAZY = {
    "RegionalRuleExtractor": "torch_amore.callbacks",
    "RuleConfidence": "torch_amore.metric_classes",
    "RuleFitness": "torch_amore.metric_classes",
    "RuleSetMetrics": "torch_amore.metric_classes",
    "RuleSupport": "torch_amore.metric_classes",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'torch_amore' has no attribute {name!r}")


__all__ = [
    "DecisionList",
    "FeatureSelection",
    "RegionalExplanation",
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
    "rule_metrics",
    "search_hyperparameters",
    "select_features",
    "sequential_covering",
    "support",
]
