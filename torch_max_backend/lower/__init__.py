"""ATen -> MAX lowering: the registry, the lowering kit, the graph build and the op families.

Nothing registers on import: ``families.register_families()`` imports the op
families, from the entry points that need the registry complete.
"""
