# torch-max-backend's optimizer step counts. A library of its own: only
# graphs with an Adam or AdamW update carry it.
