"""Compiling MAX graphs once and calling them with torch tensors."""
