"""The wizard's five steps, its actions and the lines it derives from the plan."""
