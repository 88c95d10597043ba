"""The on-disk caches, in one place: where they live, their files, clearing them.

``cache_dir`` places MAX's caches and ours (compiled-graph artifacts, built
kernel libraries) under one root; ``artifacts`` reads and writes compiled
graphs. Kernels, the runtime and export use these; nothing here imports them.
"""
