"""Reading finished runs and probes: compare, its settings diff, the probe's results and verdict; starts nothing."""
