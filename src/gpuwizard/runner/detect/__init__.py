"""Pure judgements over a job's output and timings: known failure signatures, hangs and stalls. Starts nothing."""
