# torch-max-backend's attention of one query row (a decode step's). A
# library of its own: only graphs with such an attention carry it.
