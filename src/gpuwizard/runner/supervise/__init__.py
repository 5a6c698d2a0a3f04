"""The detached process that owns one job: the supervisor, the local or SLURM job it follows, its output, stacks and
notices."""
