"""Runs against each other: throughput, loss at equal samples, and what differs between their settings."""
