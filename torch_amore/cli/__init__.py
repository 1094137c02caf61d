"""The command line ``torch-amore`` (``python -m torch_amore``): rules of a table's columns.

The parser and the commands live in :mod:`~torch_amore.cli.commands`, the subgroup expressions in
:mod:`~torch_amore.cli.expression`, reading tables in :mod:`~torch_amore.cli.table`."""

from torch_amore.cli.commands import build_parser, main

__all__ = ["build_parser", "main"]
