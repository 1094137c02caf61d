"""Shared helpers below every stage: collectives across ranks, CPU threads, stable sorting, progress bars, type
aliases. Import the modules themselves (``from torch_amore._utils import distributed as D``)."""

__all__ = ["distributed", "progress", "sorting", "threads", "typing"]
