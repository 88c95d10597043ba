"""Ahead-of-time export: a model package, and a runner that needs no torch.

``exporter`` (imports torch) writes packages; ``runner`` and ``manifest``
(import no torch) read and run them.
"""
