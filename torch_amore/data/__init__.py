"""The data at the boundary: argument checks and conversions (:mod:`~torch_amore.data.validation`), the facts of
each column in one pass (:mod:`~torch_amore.data.column_stats`), the memory model
(:mod:`~torch_amore.data.memory`) and the sources of batches for streamed extraction."""

from torch_amore.data.column_stats import ColumnStats
from torch_amore.data.memory import available_memory, check_memory, estimate_memory
from torch_amore.data.stream_disk import DiskCodes
from torch_amore.data.stream_source import BatchSource, is_source

__all__ = [
    "BatchSource",
    "ColumnStats",
    "DiskCodes",
    "available_memory",
    "check_memory",
    "estimate_memory",
    "is_source",
]
