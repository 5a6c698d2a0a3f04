"""Starting a run: the checks before it, the run folder staged whole, resume targets, the supervisor detached."""
