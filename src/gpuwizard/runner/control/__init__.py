"""A run seen from outside: following its folder, and every way a stop reaches each of its processes."""
