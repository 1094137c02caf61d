"""The command line ``torch-amore`` (``python -m torch_amore``): rules of a table's columns."""

from torch_amore.cli.commands import build_parser, main

__all__ = ["build_parser", "main"]
