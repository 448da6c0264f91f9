"""Stack layers: one module per kind, each registering itself in base.LAYER_KINDS."""

from layerbench.stacks.base import LAYER_KINDS, Exposed, Layer, build_stack, load_kinds

__all__ = ["LAYER_KINDS", "Exposed", "Layer", "build_stack", "load_kinds"]
