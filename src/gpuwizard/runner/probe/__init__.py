"""The probe's grid of short real runs and the batch search, started through launch."""
