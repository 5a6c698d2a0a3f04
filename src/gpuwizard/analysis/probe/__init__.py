"""A probe's evidence and verdict: rows, throughput and memory models, noise scale, time to loss."""
