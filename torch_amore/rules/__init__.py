"""Rules: :class:`Rule` and :class:`RuleSet`, the one functional source of support, confidence and fitness
(:mod:`~torch_amore.rules.metrics`), readable cut points, boolean masks, pruning by ``min_gain`` and
the JSON helpers."""

from torch_amore.rules.cuts import format_bound, short_cut
from torch_amore.rules.evidence import evidence_text, noise_message, verdict, warn_noise
from torch_amore.rules.held_out import HeldOut, clopper_pearson, held_out_metrics, holm
from torch_amore.rules.masks import rule_masks, rule_set_masks
from torch_amore.rules.metrics import RuleMetrics, confidence, fitness, rule_metrics, support
from torch_amore.rules.pruning import prune_rule_sets, prune_rule_sets_batches
from torch_amore.rules.rule import Rule
from torch_amore.rules.rules import RuleSet, load_rule_sets

__all__ = [
    "HeldOut",
    "Rule",
    "RuleMetrics",
    "RuleSet",
    "clopper_pearson",
    "confidence",
    "evidence_text",
    "fitness",
    "format_bound",
    "held_out_metrics",
    "holm",
    "load_rule_sets",
    "noise_message",
    "prune_rule_sets",
    "prune_rule_sets_batches",
    "rule_masks",
    "rule_metrics",
    "rule_set_masks",
    "short_cut",
    "support",
    "verdict",
    "warn_noise",
]
