"""GPU inventory, live sampling and setup advice behind one small NVML-shaped interface."""
