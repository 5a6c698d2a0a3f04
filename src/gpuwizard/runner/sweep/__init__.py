"""Several runs at once: the sweep's start, its detached scheduler, SLURM arrays and the rows its views show."""
