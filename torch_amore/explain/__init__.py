"""Explaining a model: :class:`RegionalRuleExplainer` (model -> features -> rules), the result
:class:`RegionalExplanation`, attribution of rules and the streamed explanation."""

from torch_amore.explain.attribution import RuleAttribution
from torch_amore.explain.explainer import RegionalRuleExplainer
from torch_amore.explain.explanation import RegionalExplanation

__all__ = ["RegionalExplanation", "RegionalRuleExplainer", "RuleAttribution"]
