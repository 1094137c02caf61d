"""Grids: the binning of each feature (uniform, quantile, k-means), the fine grids of the beam, the per-grid counts
and probability ratios (from stored rows, or chunk by chunk from the nodes' conditions), the candidate intervals
they give, the counts of pairs of features, and the sketched thresholds of streamed data."""

from torch_amore.grids.binning import Binned, bin_features, encode_features
from torch_amore.grids.box_counts import box_counts
from torch_amore.grids.edges import grid_edges
from torch_amore.grids.fine_grid import FineBinned, fine_binning
from torch_amore.grids.intervals import candidate_intervals
from torch_amore.grids.pair_counts import PairCounts, pair_histograms
from torch_amore.grids.ratios import grid_counts, probability_ratios
from torch_amore.grids.stream_sketch import HistogramSketch, sketch_thresholds

__all__ = [
    "Binned",
    "FineBinned",
    "HistogramSketch",
    "PairCounts",
    "bin_features",
    "box_counts",
    "encode_features",
    "candidate_intervals",
    "fine_binning",
    "grid_counts",
    "grid_edges",
    "pair_histograms",
    "probability_ratios",
    "sketch_thresholds",
]
