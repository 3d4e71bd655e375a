"""Experiments that reproduce published results (e.g. the FGD sweep)."""
