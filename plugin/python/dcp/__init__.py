"""dcp: dynamic context-parallel attention from Python.

    import dcp            # the ctypes binding of include/dcp.h (standard library only)
    import dcp.torch      # plans, autograd attention and a torch.distributed context

`dcp.load()` returns the loaded library (found at $DCP_LIB, the repository's
build/lib/libdcp.so, or the installed libdcp.so); failures of its calls raise DcpError,
which carries the status and dcp_last_error()'s text.
"""
from .core import (CustomMask, DcpError, Library, find_library, load)  # noqa: F401

__all__ = ["CustomMask", "DcpError", "Library", "find_library", "load"]
