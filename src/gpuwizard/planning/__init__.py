"""The plan: scaling, capacity and dataset checks, estimates and the plain-text report of it."""
