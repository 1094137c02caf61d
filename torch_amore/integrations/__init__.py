"""Integrations: the Lightning callback :class:`RegionalRuleExtractor`, the torchmetrics classes and the scikit-learn
estimator :class:`RegionalRuleClassifier`. Lightning and torchmetrics take seconds to import, so these names load on
first use."""

import importlib

_LAZY = {
    "RegionalRuleClassifier": "torch_amore.integrations.sklearn_estimator",
    "RegionalRuleExtractor": "torch_amore.integrations.callbacks",
    "RuleConfidence": "torch_amore.integrations.metric_classes",
    "RuleFitness": "torch_amore.integrations.metric_classes",
    "RuleSetMetrics": "torch_amore.integrations.metric_classes",
    "RuleSupport": "torch_amore.integrations.metric_classes",
    "fitness_scorer": "torch_amore.integrations.sklearn_estimator",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'torch_amore.integrations' has no attribute {name!r}")


__all__ = [
    "RegionalRuleClassifier",
    "RegionalRuleExtractor",
    "RuleConfidence",
    "RuleFitness",
    "RuleSetMetrics",
    "RuleSupport",
    "fitness_scorer",
]
