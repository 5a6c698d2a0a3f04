"""The live monitor of one run: its screen, lifecycle, header, banner, details and telemetry."""
