"""torchrun's one-node rendezvous on loopback: a plugin torchrun loads from the job's PYTHONPATH (torch only)."""
