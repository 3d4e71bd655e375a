"""Trace loaders, one module per format."""
