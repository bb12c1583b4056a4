"""Registered memory: local regions, imported remote regions, and the one
place a device kind reaches the library (check_device)."""
from __future__ import annotations

import errno as _errno
import logging
import os
import weakref
from typing import TYPE_CHECKING, Any, Optional

from . import _lib
from ._buffers import Memory
from ._core import shutdown
from ._errors import InvalidArgument, NoGPU, NotSupported, check, error_for

if TYPE_CHECKING:
    from ._core import _Core
    from ._engine import Engine
    from ._peer import Peer

log = logging.getLogger("xfer")


def cuda_available() -> bool:
    """True when libxfer can use a CUDA driver and GPU here (``xfer_cuda_available``):
    then :meth:`Engine.register` takes CUDA memory."""
    return _lib.xfer_cuda_available() == 1


def check_device(mem: Memory, op: str) -> None:
    """Refuses memory libxfer cannot register here.

    The one place a device kind reaches the C library: xfer_mr_reg takes
    CUDA memory itself (detected through the driver), but only where a
    driver is usable; anything else is refused here, before the library
    could take a device pointer for host memory.
    """
    if mem.device.is_host:
        return
    if mem.device.type != "cuda":
        raise NotSupported(
            _errno.EOPNOTSUPP,
            f"cannot register {mem.device} memory: libxfer registers host and CUDA memory only; "
            "copy to a host buffer, e.g. tensor.cpu() or pinned memory",
            op,
        )
    if not cuda_available():
        raise NoGPU(
            _lib.XFER_ENOGPU,
            f"cannot register {mem.device} memory: no usable CUDA driver or GPU here (xfer_cuda_available)",
            op,
        )


class Region:
    """Local memory registered with an engine (``Engine.register``).

    ``descriptor`` is the bytes a peer passes to ``import_region`` to write
    here. The region keeps its backing object alive; close it (or use it as a
    context manager) to deregister — :class:`xfer.Busy` while operations
    still read from it. A region that is garbage-collected deregisters itself.
    :meth:`revoke` withdraws remote access at once, e.g. before reusing memory
    whose writer may be dead.

    A closed (or revoked) region passed to an operation raises
    :class:`xfer.InvalidArgument`; on a stopped or closed engine every
    operation raises :class:`xfer.Shutdown` instead.
    """

    __slots__ = (
        "_core", "_h", "_fin", "_revoked", "engine", "obj", "ptr", "nbytes", "device", "descriptor", "_keep",
        "__weakref__",
    )

    def __init__(self, engine: "Engine", h: int, mem: Memory, obj: Any, descriptor: bytes):
        self._core = engine._core
        self._h: Optional[int] = h
        self.engine = engine
        self.obj = obj
        self.ptr = mem.ptr
        self.nbytes = mem.nbytes
        self.device = mem.device
        self.descriptor = descriptor
        self._keep = mem.keep
        self._revoked = False
        # Deregisters a region dropped without close(). At interpreter exit the
        # engine's own finalizer releases everything instead.
        self._fin = weakref.finalize(self, _region_gone, self._core, h, mem.keep)
        self._fin.atexit = False

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran (or the engine was closed)."""
        return self._h is None

    @property
    def gpu(self) -> Optional[int]:
        """The CUDA device holding the region (``xfer_mr_is_gpu``), or None for host memory."""
        h = self._h
        if h is None:
            return self.device.index if self.device.type == "cuda" else None
        dev = int(_lib.xfer_mr_is_gpu(h))
        return dev if dev >= 0 else None

    @property
    def revoked(self) -> bool:
        """True once :meth:`revoke` ran: remote writes are refused, local use too."""
        return self._revoked

    def close(self) -> None:
        """Deregisters (idempotent; a no-op once the engine is closed). Raises
        :class:`xfer.Busy` while operations use it."""
        h = self._h
        if h is None:
            return
        rc = self._core.dereg(h)
        if rc < 0:
            raise error_for(rc, "xfer_mr_dereg")
        self._fin.detach()  # the handle may be reused by the next registration
        self._h = None
        self._keep = None

    deregister = close

    def revoke(self) -> None:
        """Withdraws the registration but keeps the region (``xfer_mr_revoke``).

        Once this returns, a remote write naming the region fails at this end
        and writes nothing; every descriptor handed out stays dead (keys are
        never reused). Whether the *writer* is told depends on its provider:
        with ``NicInfo.delivery_complete`` (tcp) its write fails; on shm it
        completes as sent, though nothing lands. The region can no longer be
        used locally either (:class:`xfer.InvalidArgument`); :meth:`close` it,
        and register the memory again to hand out a new descriptor.
        Idempotent. Raises :class:`xfer.Busy` while local operations read from
        it, :class:`xfer.Shutdown` once the engine is stopped.
        """
        if self._core.stopped:
            raise shutdown("xfer_mr_revoke")
        h = self._h
        if h is None:
            raise InvalidArgument(_errno.EINVAL, "region is closed", "xfer_mr_revoke")
        check(_lib.xfer_mr_revoke(h), "xfer_mr_revoke")
        self._revoked = True

    def __enter__(self) -> "Region":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __len__(self) -> int:
        return self.nbytes

    def __repr__(self) -> str:
        state = "closed" if self._h is None else f"{self.nbytes} B at {self.ptr:#x} on {self.device}"
        return f"<xfer.Region {state}{' revoked' if self._revoked else ''}>"


def _region_gone(core: "_Core", h: int, keep: Any) -> None:
    """A Region was collected without close(): deregister it now, or — while
    the library still counts requests on it (-EBUSY) — keep its memory alive
    and retry later, so that nothing is ever freed under a posted request."""
    if os.getpid() == core.pid and not core.closed:
        ref = core.mrs.get(h)
        if ref is None or ref() is not None:
            return  # already released, and the handle now belongs to a live region
        rc = core.dereg(h)
        if rc == -_errno.EBUSY:
            with core.ctl:
                core.zombies.append((h, keep))
        elif rc < 0:
            log.warning("xfer: region %#x collected but not deregistered: %s", h, _lib.strerror(rc))


class RemoteRegion:
    """A peer's region imported from its descriptor; the target of writes.

    ``close()`` makes it unusable at once; its C handle is freed when the
    object is collected, which cannot happen while an operation uses it.
    """

    __slots__ = ("_core", "_h", "peer", "nbytes", "__weakref__")

    def __init__(self, core: "_Core", h: int, peer: "Peer"):
        self._core = core
        self._h: Optional[int] = h
        self.peer = peer
        self.nbytes = int(_lib.xfer_rmr_len(h))
        weakref.finalize(self, core.free_rmr, h).atexit = False

    @property
    def closed(self) -> bool:
        return self._h is None

    def close(self) -> None:
        self._h = None

    def __enter__(self) -> "RemoteRegion":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __len__(self) -> int:
        return self.nbytes

    def __repr__(self) -> str:
        return f"<xfer.RemoteRegion {self.nbytes} B of peer {self.peer.index}{' closed' if self._h is None else ''}>"
