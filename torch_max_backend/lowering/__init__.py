"""ATen -> MAX lowering: the registry, shared helpers, and op families."""
