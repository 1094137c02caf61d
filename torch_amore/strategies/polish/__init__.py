"""Polish: coordinate ascent of rule sets on observed values, several rule sets at once.

Each numeric rule in turn gets the interval that is best given the other rules (cut between observed values rather
than on a grid), or is dropped when it does nothing: the other rules alone are at least as good and keep
``min_support`` samples. One sweep over the rules (the grid searches before it have converged already). Fitness
never decreases, and with ``min_confidence`` a confident rule set stays confident (rule sets are compared by
:class:`torch_amore.strategies.best_interval.Objective`).

In one process all rule sets move together, one rule position per step: each column is argsorted once
(:class:`SortedColumns`), the best interval over a column's sorted values restricted to the other rules' rows comes
from prefix sums on fixed-size tensors (:func:`best_cuts`, cuts only between distinct values), decisions are taken on
device, and one ``.tolist()`` per step brings the few numbers the host needs (the new cuts' observed neighbours, for
:func:`torch_amore.rules.cuts.short_cut`). A sharded (DDP) run polishes rule set by rule set with
:func:`torch_amore.strategies.best_interval.exact_best_interval` on reduced counts (:func:`polish_one`): the
single-process result.

From ``_COMPACT_ROWS`` (2**18) samples on, each rule set's step instead sorts the values of its own samples (those
satisfying its other rules; one host sync each for their count) and runs :func:`best_cuts` on them alone: the same
cuts, with work and memory in proportion to those samples rather than to N (1,000,000 x 16, ``max_length`` 3: the
polish from 0.62 s to 0.37 s), and no sorted column is kept. The rule sets are then polished on a copy of the
columns their rules use, renumbered to it and back: a column of a wide row-major ``X`` read alone costs nearly a
pass over all of X, and each step reads its columns several times (1,000,000 x 128 float32: about 12 ms a column).

Memory follows the data: where N is large, rows (and kappas, columns and rule masks) are taken a few at a time so
that each working table stays near ``_CHUNK_BYTES`` (8 MiB; at 1,000,000 rows a row at a time), the cache of a
sorted column is an int32 order and three flags per row, and the values next to the cuts are read from ``X`` at the
cuts only. Where N is small everything is one batch (the same operations as one chunk).

With ``row_chunk`` (:class:`SortedColumns`; codes on disk), each step sorts a rule set's values in place as integer
keys and scans them a chunk at a time (:mod:`torch_amore.strategies.polish.scanned_cuts`): 4 or 8 bytes a sample instead
of the tables of :func:`best_cuts`, the same cuts.
"""

from torch_amore.strategies.polish.cut_tables import best_cuts
from torch_amore.strategies.polish.scanned_cuts import scanned_cuts, sorted_keys
from torch_amore.strategies.polish.sorted_columns import SortedColumns
from torch_amore.strategies.polish.sweep import polish_many, polish_one

__all__ = ["SortedColumns", "best_cuts", "polish_many", "polish_one", "scanned_cuts", "sorted_keys"]
