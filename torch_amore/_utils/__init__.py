"""Shared helpers below every stage: sync-free counting, collectives across ranks, CPU
threads, stable sorting, sync-free host-to-device copies, progress bars, type aliases. Import the modules
themselves (``from torch_amore._utils import distributed as D``)."""

__all__ = ["counting", "distributed", "one_warning", "progress", "sorting", "threads", "transfer", "typing"]
