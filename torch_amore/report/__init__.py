"""Showing rules: near-duplicates collapsed (:mod:`~torch_amore.report.distinct`), figures of rules
(:mod:`~torch_amore.report.plot`) and the self-contained HTML report (:mod:`~torch_amore.report.html`)."""

from torch_amore.report.distinct import distinct_rule_sets, duplicate_of, row_jaccard
from torch_amore.report.html import explanation_html, figure_data_uri, write_html
from torch_amore.report.pixel_maps import plot_rule_attributions
from torch_amore.report.plot import plot_rule, plot_rule_means

__all__ = [
    "distinct_rule_sets",
    "duplicate_of",
    "row_jaccard",
    "explanation_html",
    "figure_data_uri",
    "plot_rule",
    "plot_rule_attributions",
    "plot_rule_means",
    "write_html",
]
