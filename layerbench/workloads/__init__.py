"""Workloads: one module per kind, each registering itself in base.WORKLOAD_KINDS."""

from layerbench.workloads.base import WORKLOAD_KINDS, Prepared, Workload, load_kinds

__all__ = ["WORKLOAD_KINDS", "Prepared", "Workload", "load_kinds"]
