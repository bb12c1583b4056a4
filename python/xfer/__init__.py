"""xfer: point-to-point RDMA-style transfers (one-sided writes with immediates).

A thin, low-overhead ctypes binding of libxfer::

    import numpy as np, xfer

    with xfer.Engine(provider="tcp", nics="lo") as eng:
        peer = eng.add_peer(their_address)          # bytes from the other side
        src = eng.register(np.arange(1 << 20, dtype=np.uint8))
        dst = eng.import_region(peer, their_descriptor)
        eng.write(src, dst, imm=7).result(timeout=5)

The receiving side arms ``eng.expect_imm(7, 1)`` and waits on it (or on a
:class:`Signal` word the completion stores into: ``signal=(sig, 1)``). A
:class:`Watcher` calls back when a GPU kernel bumps its word. Addresses
(``Engine.address``) and descriptors (``Region.descriptor``) are plain bytes
the application moves itself — never pickled objects.

Library lookup: ``$XFER_LIBRARY``, the copy bundled in ``xfer/lib/`` (the
wheel), the repository's ``build/libxfer.so`` (development), then
``ctypes.util.find_library("xfer")``. The library's log lines go to the
``logging`` logger ``"xfer"`` (:func:`route_logs`).
"""
from . import _lib
from ._log import logs_routed, route_logs
from ._version import __version__
from ._buffers import Device
from ._completion import OP_KINDS, Completion, ScatterCompletion, wait
from ._engine import Engine, NicInfo, Stats, Trace
from ._peer import Group, Peer, ScatterEntry
from ._recv import Message
from ._region import Region, RemoteRegion, cuda_available
from ._signal import Signal
from ._topology import CPU_AUTO, TopologyDevice, nics_for_gpu, topology
from ._watcher import SPIN_FOREVER, Watcher
from . import moe  # expert-parallel dispatch/combine (xfer.moe.MoE)
from ._errors import (
    Again,
    ArgumentTypeError,
    BadWire,
    Busy,
    Cancelled,
    Error,
    FabricError,
    ForeignDescriptor,
    InvalidArgument,
    MessageTooLong,
    NoGPU,
    NoProvider,
    NoSpace,
    NotFound,
    NotSupported,
    OutOfMemory,
    PeerConnectionError,
    PeerError,
    ProviderMismatch,
    Shutdown,
    StaleRegion,
    TimeoutError,
    WouldBlock,
    errno_name,
    error_for,
)

#: Path of the libxfer shared object in use.
LIBRARY_PATH: str = _lib.LIBRARY_PATH
#: Its xfer_version(); import fails unless it equals ``__version__``.
LIBRARY_VERSION: str = _lib.LIBRARY_VERSION

#: Write flags (``flags=``): ``F_SHARD`` splits one write over the NICs
#: (``Peer.shards`` slices, each delivering the immediate), ``F_NIC(n)`` pins
#: every request of a write, paged write or scatter to NIC n (an index into
#: ``Engine.nics``). ``imm=`` sets the immediate flag itself.
F_SHARD: int = _lib.XFER_F_SHARD
F_NIC = _lib.XFER_F_NIC

OP_SEND: int = _lib.XFER_OP_SEND
OP_WRITE: int = _lib.XFER_OP_WRITE
OP_PAGED: int = _lib.XFER_OP_PAGED
OP_IMM: int = _lib.XFER_OP_IMM
OP_EXPECT: int = _lib.XFER_OP_EXPECT
OP_CANCEL: int = _lib.XFER_OP_CANCEL
OP_SCATTER: int = _lib.XFER_OP_SCATTER
OP_BARRIER: int = _lib.XFER_OP_BARRIER


def strerror(code: int) -> str:
    """The library's message for an error code (``xfer_strerror``)."""
    return _lib.strerror(code)


__all__ = [
    "Engine",
    "Peer",
    "Region",
    "RemoteRegion",
    "Group",
    "ScatterEntry",
    "ScatterCompletion",
    "NicInfo",
    "Completion",
    "Message",
    "Stats",
    "Trace",
    "Signal",
    "Watcher",
    "SPIN_FOREVER",
    "Device",
    "TopologyDevice",
    "cuda_available",
    "topology",
    "nics_for_gpu",
    "CPU_AUTO",
    "wait",
    "strerror",
    "errno_name",
    "error_for",
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
    "F_SHARD",
    "F_NIC",
    "OP_SEND",
    "OP_WRITE",
    "OP_PAGED",
    "OP_IMM",
    "OP_EXPECT",
    "OP_CANCEL",
    "OP_SCATTER",
    "OP_BARRIER",
    "OP_KINDS",
    "LIBRARY_PATH",
    "LIBRARY_VERSION",
    "route_logs",
    "logs_routed",
    "__version__",
]
