"""Launching jobs in their own session, watching them from the run folder, and the run history."""
