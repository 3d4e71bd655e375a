"""Trace loaders, one module per format."""


class TraceError(ValueError):
    """A bad trace or job file. ``str(err)`` is ``FILE:LINE: why``."""
