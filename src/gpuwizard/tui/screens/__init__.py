"""Full screens over finished work: runs and compare, a sweep, a probe."""
