"""Feature selection before the search (Algorithm 1 of the paper): attribution and the longest frequent itemset."""

from torch_amore.selection.itemsets import LongestItemset, longest_frequent_itemset
from torch_amore.selection.selection import FeatureSelection, select_features

__all__ = ["FeatureSelection", "LongestItemset", "longest_frequent_itemset", "select_features"]
