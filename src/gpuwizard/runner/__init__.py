"""Starting and owning jobs: the checks before a launch, the run folder staged whole, the detached supervisor that
runs and watches a job (locally or under SLURM), the follower that reads it back, stopping, resuming, the probe's
grid of short runs, and notices."""
