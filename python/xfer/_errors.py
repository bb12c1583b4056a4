"""Typed exceptions for the library's negative error codes.

Every exception is an :class:`xfer.Error`, itself an :class:`OSError`, so
``exc.errno`` holds the (positive) code and ``exc.strerror`` the library's
message from ``xfer_strerror``. Where a builtin exception means the same
thing the class derives from it too: :class:`TimeoutError` is also the
builtin ``TimeoutError``, :class:`InvalidArgument` is also a ``ValueError``,
:class:`PeerConnectionError` (a :class:`PeerError`) is also the builtin
``ConnectionError``.
"""
from __future__ import annotations

import builtins
import errno as _errno
from typing import Dict, Optional, Type

from . import _lib

__all__ = [
    "Error",
    "TimeoutError",
    "PeerError",
    "PeerConnectionError",
    "InvalidArgument",
    "ArgumentTypeError",
    "WouldBlock",
    "Again",
    "BadWire",
    "ForeignDescriptor",
    "ProviderMismatch",
    "Cancelled",
    "Busy",
    "NotFound",
    "StaleRegion",
    "Shutdown",
    "MessageTooLong",
    "NoProvider",
    "NoGPU",
    "FabricError",
    "OutOfMemory",
    "NotSupported",
    "NoSpace",
    "error_for",
    "check",
    "check_int",
    "wrong_type",
    "out_of_range",
]


class Error(OSError):
    """Base class of every error raised by xfer.

    ``errno`` is the positive error code (an errno value, or one of the
    library's own codes from 257 up), ``strerror`` its message and ``op``
    the operation that failed (e.g. ``"xfer_write"``), when known.
    """

    op: Optional[str]

    def __init__(self, code: int, message: Optional[str] = None, op: Optional[str] = None):
        code = abs(int(code))
        msg = message if message is not None else _lib.strerror(code)
        super().__init__(code, msg)
        self.op = op

    @property
    def code(self) -> int:
        """The negative code the C API returned (``-errno``)."""
        return -int(self.errno or 0)

    def __str__(self) -> str:
        where = f"{self.op}: " if self.op else ""
        return f"{where}{self.strerror} [{errno_name(self.errno or 0)}]"

    def __reduce__(self):  # picklable across processes (e.g. multiprocessing)
        return (type(self), (self.errno, self.strerror, self.op))


class TimeoutError(Error, builtins.TimeoutError):
    """-ETIMEDOUT: a deadline (``timeout_ms``) or a wait's timeout passed."""


class PeerError(Error):
    """The peer failed or is unreachable.

    Raised as such for -XFER_EPEER: the engine declared the peer dead
    (``Peer.state == "dead"``); pending operations to it complete so, and new
    submissions to it fail at once. Its subclass :class:`PeerConnectionError`
    covers the transport's own errors.
    """


class PeerConnectionError(PeerError, builtins.ConnectionError):
    """-ENOTCONN, -ECONNRESET, -ECONNREFUSED, -ECONNABORTED, -EPIPE,
    -EHOSTUNREACH, -ENETUNREACH: the provider lost (or could not make) the
    connection to the peer while this operation was in flight.

    The engine does not declare the peer dead for this alone: it probes the
    peer at once, and only a peer that then fails its probes becomes dead
    (later submissions raise :class:`PeerError`). A peer that rejected one
    bad write, for instance, answers and stays live. It is a
    :class:`PeerError` and also the builtin ``ConnectionError``.
    """


class InvalidArgument(Error, ValueError):
    """-EINVAL: a bad argument (range, flag, handle, dtype, ...)."""


class ArgumentTypeError(InvalidArgument, TypeError):
    """-EINVAL for an argument of the wrong type (a local Region where a
    RemoteRegion belongs, a str for an int): an :class:`InvalidArgument`,
    and also the builtin ``TypeError``."""


class WouldBlock(Error):
    """-EAGAIN: the submission queue is full; let completions drain and retry."""


Again = WouldBlock


class BadWire(Error, ValueError):
    """-XFER_EBADWIRE / -XFER_EVERSION: malformed or unsupported address or descriptor bytes."""


class ForeignDescriptor(Error, ValueError):
    """-XFER_EFOREIGN: the descriptor belongs to another engine than the peer."""


class ProviderMismatch(Error):
    """-XFER_EPROVIDER: the address was made by a different provider."""


class Cancelled(Error):
    """-ECANCELED: the operation was cut short (disarm, cancel, engine close)."""


class Busy(Error):
    """-EBUSY: the object is in use (operations in flight, immediate already armed)."""


class NotFound(Error, LookupError):
    """-ENOENT: no such peer (never added, or removed)."""


class StaleRegion(Error):
    """-ESTALE: the remote region's peer was removed or restarted."""


class Shutdown(Error):
    """-ESHUTDOWN: the engine is closed."""


class MessageTooLong(Error, ValueError):
    """-EMSGSIZE: a SEND longer than msg_max, or a write longer than the provider allows."""


class NoProvider(Error):
    """-XFER_ENOPROV / -ENODEV: no libfabric provider or NIC matches the request."""


class NoGPU(Error):
    """-XFER_ENOGPU: no GPU or CUDA driver available."""


class FabricError(Error):
    """-XFER_EFABRIC: a provider error with no errno equivalent."""


class OutOfMemory(Error, MemoryError):
    """-ENOMEM."""


class NotSupported(Error):
    """-EOPNOTSUPP: the loaded libxfer cannot do this (e.g. device memory)."""


class NoSpace(Error):
    """-ENOSPC: a fixed limit is reached (``max_regions`` registered regions,
    the engine's peer table, or 64 cancellations in flight)."""


_BY_CODE: Dict[int, Type[Error]] = {
    _errno.ETIMEDOUT: TimeoutError,
    _lib.XFER_EPEER: PeerError,
    _errno.ENOTCONN: PeerConnectionError,
    _errno.ECONNRESET: PeerConnectionError,
    _errno.ECONNREFUSED: PeerConnectionError,
    _errno.ECONNABORTED: PeerConnectionError,
    _errno.EPIPE: PeerConnectionError,
    _errno.EHOSTUNREACH: PeerConnectionError,
    _errno.ENETUNREACH: PeerConnectionError,
    _errno.EINVAL: InvalidArgument,
    _errno.EAGAIN: WouldBlock,
    _lib.XFER_EBADWIRE: BadWire,
    _lib.XFER_EVERSION: BadWire,
    _lib.XFER_EFOREIGN: ForeignDescriptor,
    _lib.XFER_EPROVIDER: ProviderMismatch,
    _errno.ECANCELED: Cancelled,
    _errno.EBUSY: Busy,
    _errno.ENOENT: NotFound,
    _errno.ESTALE: StaleRegion,
    _errno.ESHUTDOWN: Shutdown,
    _errno.EMSGSIZE: MessageTooLong,
    _lib.XFER_ENOPROV: NoProvider,
    _errno.ENODEV: NoProvider,
    _lib.XFER_ENOGPU: NoGPU,
    _lib.XFER_EFABRIC: FabricError,
    _errno.ENOMEM: OutOfMemory,
    _errno.EOPNOTSUPP: NotSupported,
    _errno.ENOSPC: NoSpace,
}

_NAMES = {
    _lib.XFER_EBADWIRE: "XFER_EBADWIRE",
    _lib.XFER_EVERSION: "XFER_EVERSION",
    _lib.XFER_EFOREIGN: "XFER_EFOREIGN",
    _lib.XFER_EPROVIDER: "XFER_EPROVIDER",
    _lib.XFER_EPEER: "XFER_EPEER",
    _lib.XFER_EFABRIC: "XFER_EFABRIC",
    _lib.XFER_ENOGPU: "XFER_ENOGPU",
    _lib.XFER_ENOPROV: "XFER_ENOPROV",
}


def errno_name(code: int) -> str:
    """Symbolic name of an error code: ``ETIMEDOUT``, ``XFER_EPEER``, ..."""
    code = abs(int(code))
    return _NAMES.get(code) or _errno.errorcode.get(code, str(code))


def error_for(code: int, op: Optional[str] = None, message: Optional[str] = None) -> Error:
    """The exception object for a (negative or positive) error code."""
    cls = _BY_CODE.get(abs(int(code)), Error)
    return cls(code, message, op)


def check(rc: int, op: str) -> int:
    """Returns ``rc`` when it is not negative, raises the matching exception otherwise."""
    if rc < 0:
        raise error_for(rc, op)
    return rc


# ------------------------------------------------ checks before C sees them


def wrong_type(what: str, want: str, got: object, op: Optional[str]) -> ArgumentTypeError:
    """The error for an argument of the wrong type, naming both types."""
    return ArgumentTypeError(_errno.EINVAL, f"{what} must be {want}, not {type(got).__name__}", op)


def out_of_range(name: str, value: object, lo: int, hi: int, op: Optional[str]) -> Error:
    """The error for an integer that does not fit its C field: a TypeError
    when it is no int at all, else a ValueError naming the range."""
    if not isinstance(value, int) or isinstance(value, bool):
        return wrong_type(name, "an int", value, op)
    return InvalidArgument(_errno.EINVAL, f"{name} must be in {_bound(lo)} .. {_bound(hi)}, not {value}", op)


def _bound(v: int) -> str:
    """2**64-1 rather than 18446744073709551615."""
    for bits in (8, 16, 31, 32, 63, 64):
        if v == (1 << bits) - 1:
            return f"2**{bits}-1"
        if v == -(1 << bits):
            return f"-2**{bits}"
    return str(v)


def check_int(value: object, name: str, lo: int, hi: int, op: Optional[str]) -> int:
    """``value`` when it is an int in [lo, hi], else the error that says why."""
    if isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi:
        return value
    raise out_of_range(name, value, lo, hi, op)
