"""libxfer's log lines into the standard :mod:`logging` module.

At import the package sets a handler with ``xfer_log_set_handler`` that
logs every line of the C library to the logger ``"xfer"`` at the matching
level (error, warning, info, debug), instead of writing it to stderr. What
reaches the handler is still chosen by the library's level: ``XFER_LOG_LEVEL``
(``error``, ``warn``, ``info``, ``debug`` or 0-3) or ``Engine(log_level=)``.

The handler runs on the thread that logs, often an engine's worker thread,
and takes the GIL there: a worker that logs while Python code holds the GIL
waits for it. Nothing on the data path logs unless the level asks for it
(info, debug) or something failed. ``route_logs(False)`` sends the lines back
to stderr.
"""
from __future__ import annotations

import atexit
import ctypes
import logging

from . import _lib

logger = logging.getLogger("xfer")

_LEVELS = {0: logging.ERROR, 1: logging.WARNING, 2: logging.INFO, 3: logging.DEBUG}


def _handle(ctx, level, msg) -> None:  # type: ignore[no-untyped-def]
    try:
        logger.log(_LEVELS.get(level, logging.DEBUG), "%s", msg.decode("utf-8", "replace"))
    except Exception:  # pragma: no cover - never let an exception reach C
        pass


_handler = _lib.xfer_log_fn(_handle)  # kept alive for as long as the library may call it
_routed = False


def route_logs(enable: bool = True) -> None:
    """Route libxfer's log lines to the ``"xfer"`` logger (True, the default
    at import) or back to stderr as ``xfer[pid] level: message`` (False)."""
    global _routed
    _lib.xfer_log_set_handler(ctypes.cast(_handler, ctypes.c_void_p) if enable else None, None)
    _routed = enable


def logs_routed() -> bool:
    """Whether log lines currently go to the ``"xfer"`` logger."""
    return _routed


route_logs(True)
# Before the interpreter goes: a worker that logs after this writes to stderr
# instead of calling into a finalizing interpreter.
atexit.register(route_logs, False)
