"""Lowerings, one module per op family; ``lower.families`` lists and registers them."""
