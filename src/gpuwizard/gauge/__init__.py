"""The gauge: runs inside the training interpreter (torch, no gpuwizard), its folder first on the job's PYTHONPATH."""
