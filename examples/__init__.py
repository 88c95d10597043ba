"""Example scripts; ``architectures`` is shared with the benchmark zoo."""
