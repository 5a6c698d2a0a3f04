"""The built-in demo trainer: a small policy on a synthetic SO-100-like dataset, DDP under torchrun."""
