"""Feature selection before the search: which features (inputs or a layer's units) matter for the subgroup, by
attribution and by the longest frequent itemset of the subgroup's strongest units."""

from torch_amore.selection.itemsets import LongestItemset, longest_frequent_itemset
from torch_amore.selection.selection import FeatureSelection, select_features

__all__ = ["FeatureSelection", "LongestItemset", "longest_frequent_itemset", "select_features"]
