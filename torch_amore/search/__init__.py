"""The search: :func:`extract_rules` (validate, bin, run the strategies, make readable rules), its options object,
and the streamed extraction over batches larger than memory."""

from torch_amore.search.extract import extract_rules
from torch_amore.search.extractor import Extractor, search_scope
from torch_amore.search.options import SearchOptions
from torch_amore.search.readable import ReadableRules
from torch_amore.search.stream import StreamExtractor, prepare_stream

__all__ = [
    "Extractor",
    "ReadableRules",
    "SearchOptions",
    "StreamExtractor",
    "extract_rules",
    "prepare_stream",
    "search_scope",
]
