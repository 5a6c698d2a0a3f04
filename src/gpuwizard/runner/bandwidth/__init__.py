"""`gpus --bandwidth`: the all-reduce ranks it starts and the figures it reads back."""
