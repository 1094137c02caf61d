"""``torch_amore.plot``: the documented path of :mod:`torch_amore.report.plot`, the same module object (loaded on
first use: the report's modules are a part of the import that a search does not need)."""

import sys

from torch_amore.report import plot as _plot

sys.modules[__name__] = _plot
