"""The compile pipeline's stages, which ``backend.py`` strings together.

In the order a graph meets them, each depending only on those before it
(tests/test_layering.py keeps the order):

- ``handoff``: the layouts PyTorch and MAX hand each other at a split;
- ``fallback``: where each node runs (MAX blocks or PyTorch), and the warning;
- ``graph_builds``: each graph and block built into a MAX graph once, and
  the FX passes' findings for it run once;
- ``warm_start``: a graph compiled before, loaded from its record without a
  build;
- ``product_upgrade``: a running graph of summed products switched to
  MAX's matmul once that version has compiled;
- ``compiling``: a built graph compiled, loaded and made a callable;
- ``background``: compiling while the graph runs in PyTorch;
- ``deferred``: a step's forward and backward compiled together, waited for
  at their first calls.
"""
