"""gpuwizard: plan, launch and watch multi-GPU fine-tunes of robot policies."""

__version__ = "0.1.0"
