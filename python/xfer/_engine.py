"""Engine, peers, regions and completions over libxfer (ctypes)."""
from __future__ import annotations

import concurrent.futures
import ctypes
import errno as _errno
import functools
import itertools
import logging
import os
import struct
import threading
import time
import weakref
from ctypes import addressof, byref, c_size_t, c_uint32, c_void_p
from typing import (
    Any,
    Callable,
    Dict,
    Iterable,
    List,
    NamedTuple,
    Optional,
    Sequence,
    Tuple,
    Union,
)

from . import _lib
from ._buffers import CPU, Device, DeviceLike, Memory, buffer_ptr, index_array, resolve
from ._signal import SignalSpec, signal_args
from ._errors import (
    Cancelled,
    Error,
    InvalidArgument,
    NoGPU,
    NotSupported,
    PeerError,
    Shutdown,
    TimeoutError,
    check,
    error_for,
)

log = logging.getLogger("xfer")

BytesLike = Union[bytes, bytearray, memoryview]
CompletionCallback = Callable[["Completion"], Any]

_E_TIMEDOUT = -_errno.ETIMEDOUT
_REAP_BATCH = 256
_REAP_SLICE_MS = 20  # how long the reaper sleeps in C before it looks at its stop flag
_WAIT_SLICE_S = 0.2  # blocking waits wake this often (KeyboardInterrupt, close)
_iter_cqes = struct.Struct("<QiI").iter_unpack
_string_at = ctypes.string_at

OP_KINDS = {
    _lib.XFER_OP_SEND: "send",
    _lib.XFER_OP_WRITE: "write",
    _lib.XFER_OP_PAGED: "paged",
    _lib.XFER_OP_IMM: "imm",
    _lib.XFER_OP_EXPECT: "expect",
    _lib.XFER_OP_CANCEL: "cancel",
    _lib.XFER_OP_SCATTER: "scatter",
    _lib.XFER_OP_BARRIER: "barrier",
}


class Message(NamedTuple):
    """A received SEND: its bytes, the sender's engine id and, if known here, its Peer."""

    data: bytes
    src_id: int
    peer: Optional["Peer"]


class Stats(NamedTuple):
    """Counters of ``struct xfer_stats``."""

    ops_submitted: int
    ops_completed: int
    ops_failed: int
    wrs_posted: int
    bytes_written: int
    imms_received: int
    imms_dropped: int
    msgs_received: int
    worker_sleeps: int


class NicInfo(NamedTuple):
    """``struct xfer_nic_info`` of one NIC (``Engine.nic_info``)."""

    nic: int  #: its index in ``Engine.nics``
    provider: str  #: e.g. "tcp;ofi_rxm", "shm"
    domain: str  #: the domain (interface) name, e.g. "lo"
    tx_depth: int
    rx_depth: int
    max_msg: int  #: the largest single transfer
    #: True: a write completes once its data is at the target, and a write the
    #: target rejects (revoked region) completes with an error. False (shm): it
    #: completes once sent; a rejected write still lands nothing, but the
    #: writer is not told.
    delivery_complete: bool
    gpu_path: str  #: "native" (FI_HMEM: GPU memory registered in place) or "staged" through host memory


class Trace(NamedTuple):
    """One ``struct xfer_trace`` record (CLOCK_MONOTONIC ns, as time.monotonic_ns())."""

    user_data: int
    kind: int
    wrs: int
    t_call: int
    t_enq: int
    t_deq: int
    t_first: int
    t_last: int
    t_done: int
    t_first_ret: int  #: the provider's post call for the first request returned


# ---------------------------------------------------------------- completion


class Completion:
    """The future result of one operation.

    It follows :class:`concurrent.futures.Future`: :meth:`done`,
    :meth:`result`, :meth:`exception`, :meth:`add_done_callback`; on failure
    ``result()`` raises the typed :class:`xfer.Error` for the C result code.
    :attr:`future` gives a real ``concurrent.futures.Future`` (for
    ``concurrent.futures.wait``/``as_completed``) and ``await completion``
    works in asyncio. Completions cannot be cancelled one by one
    (:meth:`cancel` returns False): submit with ``tag=`` and use
    :meth:`Engine.cancel`.

    Callbacks run on the engine's reaper thread (or in whichever thread calls
    :meth:`Engine.progress` when the engine has none); keep them short.
    """

    __slots__ = ("_core", "user_data", "kind", "_res", "_done", "_keep", "_cbs", "__weakref__")

    def __init__(self, core: "_Core", user_data: int, kind: int, keep: Any = None):
        self._core = core
        self.user_data = user_data
        self.kind = kind
        self._res = 0
        self._done = False
        self._keep = keep  # buffers, regions and index arrays the C side reads until completion
        self._cbs: Optional[List[CompletionCallback]] = None

    # -- state
    def done(self) -> bool:
        """True once the operation has completed (successfully or not)."""
        return self._done

    def running(self) -> bool:
        """True while the operation is in flight."""
        return not self._done

    def cancelled(self) -> bool:
        """True if the operation completed with -ECANCELED."""
        return self._done and self._res == -_errno.ECANCELED

    def cancel(self) -> bool:
        """Always False: cancel by tag with :meth:`Engine.cancel`."""
        return False

    @property
    def res(self) -> Optional[int]:
        """The raw C result (0, a count, or -errno); None while in flight."""
        return self._res if self._done else None

    @property
    def kind_name(self) -> str:
        return OP_KINDS.get(self.kind, str(self.kind))

    # -- waiting
    def wait(self, timeout: Optional[float] = None) -> bool:
        """Blocks until done or ``timeout`` seconds pass; returns :meth:`done`."""
        if self._done:
            return True
        return self._core.wait_for(self, timeout)

    def result(self, timeout: Optional[float] = None) -> int:
        """Waits, then returns the result (0; a count for :meth:`Engine.cancel`) or raises.

        Raises :class:`xfer.TimeoutError` (a builtin ``TimeoutError`` too) if
        ``timeout`` seconds pass first — the operation itself goes on.
        """
        if not self._done and not self._core.wait_for(self, timeout):
            raise TimeoutError(_errno.ETIMEDOUT, f"{self.kind_name} not complete after {timeout} s", "wait")
        if self._res < 0:
            raise error_for(self._res, self.kind_name)
        return self._res

    def exception(self, timeout: Optional[float] = None) -> Optional[Error]:
        """Waits like :meth:`result`, returns the error (or None) instead of raising it."""
        if not self._done and not self._core.wait_for(self, timeout):
            raise TimeoutError(_errno.ETIMEDOUT, f"{self.kind_name} not complete after {timeout} s", "wait")
        return error_for(self._res, self.kind_name) if self._res < 0 else None

    def add_done_callback(self, fn: CompletionCallback) -> None:
        """Calls ``fn(self)`` once done (at once, in this thread, if already done)."""
        with self._core.cb_lock:
            if not self._done:
                if self._cbs is None:
                    self._cbs = [fn]
                else:
                    self._cbs.append(fn)
                return
        _run_callback(fn, self)

    @property
    def future(self) -> "concurrent.futures.Future[int]":
        """A ``concurrent.futures.Future`` that completes with this operation."""
        f: concurrent.futures.Future = concurrent.futures.Future()
        f.set_running_or_notify_cancel()

        def relay(c: Completion) -> None:
            if c._res < 0:
                f.set_exception(error_for(c._res, c.kind_name))
            else:
                f.set_result(c._res)

        self.add_done_callback(relay)
        return f

    def __await__(self):
        import asyncio

        return asyncio.wrap_future(self.future).__await__()

    def __repr__(self) -> str:
        state = f"res={self._res}" if self._done else "pending"
        return f"<xfer.Completion {self.kind_name} #{self.user_data} {state}>"


def _run_callback(fn: CompletionCallback, c: Completion) -> None:
    try:
        fn(c)
    except Exception:  # noqa: BLE001 - like concurrent.futures: log, never propagate
        log.exception("xfer: exception in completion callback %r for %r", fn, c)


def wait(completions: Iterable[Completion], timeout: Optional[float] = None) -> None:
    """Waits for every completion; raises the first failure, or TimeoutError after ``timeout`` s."""
    deadline = None if timeout is None else time.monotonic() + timeout
    for c in completions:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        c.result(left)


# ---------------------------------------------------------------------- core


_SE = _lib.packer(_lib.xfer_scatter_entry)
_SC = _lib.packer(_lib.xfer_scatter_t)
_pack_se = _SE.pack_into
_W = _lib.packer(_lib.xfer_write_t)
_PW = _lib.packer(_lib.xfer_paged_write_t)
_C = _lib.packer(_lib.xfer_completion)
# Every submission packs the whole struct xfer_completion: the per-thread
# buffer is reused, and a signal left over from an earlier operation would
# make the worker store into memory nobody keeps alive any more.
assert [f[0] for f in _lib.xfer_completion._fields_] == [
    "user_data", "cb", "cb_ctx", "timeout_ms", "tag", "signal", "signal_value"
]
_pack_w = _W.pack_into
_pack_pw = _PW.pack_into
_pack_c = _C.pack_into
_OFF_PW = _W.size
_OFF_C = _W.size + _PW.size


class _Scratch(threading.local):
    """Per-thread submission structs in one buffer, packed with struct.pack_into.

    The C side copies a submission before returning, so the buffer is reused.
    """

    def __init__(self) -> None:
        self.buf = bytearray(_OFF_C + _C.size)
        self._anchor = ctypes.c_char.from_buffer(self.buf)  # pins the buffer
        base = addressof(self._anchor)
        self.aw = base
        self.apw = base + _OFF_PW
        self.ac = base + _OFF_C


def _bad_values(op: str, ex: Exception) -> InvalidArgument:
    return InvalidArgument(_errno.EINVAL, f"offsets, lengths, strides, tags and timeouts must be non-negative ints that fit 64 bits ({ex})", op)


def _check_imm(imm: int, op: str) -> None:
    if not 0 <= imm <= 0xFFFFFFFF:
        raise InvalidArgument(_errno.EINVAL, f"imm {imm} is not a 32-bit unsigned value", op)


def _pack_completion(core: "_Core", op: str, timeout_ms: int, tag: int, signal: Optional["SignalSpec"]) -> Tuple[int, Any]:
    """Packs the struct xfer_completion of a call whose other arguments are
    plain values into this thread's scratch; returns the new user_data and
    what keeps the signal word alive."""
    sa = sv = 0
    sk = None
    if signal is not None:
        sa, sv, sk = signal_args(signal, op)
    ud = next(core.ids)
    try:
        _pack_c(core.scratch.buf, _OFF_C, ud, 0, 0, timeout_ms, tag, sa, sv)
    except struct.error as ex:
        raise _bad_values(op, ex) from None
    return ud, sk


class _Core:
    """State shared by an Engine and everything made from it.

    Nothing here refers back to the Engine object, so dropping the Engine
    runs its finalizer (which closes) even while the reaper thread runs.
    The C engine is destroyed only when this core is unreachable: no Python
    object can then still pass its handle to the library.
    """

    def __init__(self, h: int, manual: bool):
        self.h = h
        self.pid = os.getpid()
        self.manual = manual
        self.pending: Dict[int, Completion] = {}
        self.ids = itertools.count(1)
        self.cv = threading.Condition(threading.Lock())
        self.waiters = 0
        self.cb_lock = threading.Lock()
        self.ctl = threading.RLock()  # control path: regions, peers, close
        self.stopped = False  # xfer_engine_stop ran: submissions raise Shutdown
        self.closed = False  # and every handle was released
        self.stopping = False  # tells the reaper and receive threads to exit
        self.mrs: Dict[int, "weakref.ref[Region]"] = {}
        self.rmrs: Dict[int, "weakref.ref[RemoteRegion]"] = {}
        self.orphan_rmrs: set = set()  # imported before close, freed when their objects go
        self.peers_by_id: Dict[int, "weakref.ref[Peer]"] = {}
        # Every peer added and not removed, by index: (engine id, its Peer).
        self.peers: Dict[int, Tuple[int, "weakref.ref[Peer]"]] = {}
        self.down_reported: set = set()  # peer indices on_peer_down was called for
        self.scratch = _Scratch()
        self.reaper: Optional[threading.Thread] = None
        self.receiver: Optional[threading.Thread] = None
        self.down_signal: Optional[_lib.PeerDownSignal] = None
        self.on_peer_down: Optional[Callable[..., Any]] = None
        self.poll_buf = (_lib.xfer_cqe * _REAP_BATCH)()
        self.zombies: List[Tuple[int, Any]] = []  # collected regions still busy in C
        self.zombie_groups: List[Tuple[int, Any]] = []  # collected groups still busy in C
        self.poll_lock = threading.Lock()
        self.nic_infos: List[NicInfo] = []
        self.strays = 0  # completions that matched no pending operation

    # -- completions
    def dispatch(self, raw: bytes) -> int:
        pop = self.pending.pop
        n = 0
        for ud, res, kind in _iter_cqes(raw):
            op = pop(ud, None)
            if op is None:
                self.strays += 1  # never submitted from here, or completed twice
                continue
            n += 1
            op._res = res
            op._keep = None
            op._done = True
            if op._cbs is not None:
                with self.cb_lock:
                    cbs, op._cbs = op._cbs, None
                for fn in cbs or ():
                    _run_callback(fn, op)
        if self.waiters:
            with self.cv:
                self.cv.notify_all()
        return n

    def progress(self, timeout_ms: int) -> int:
        """Reaps completions in this thread; returns how many operations finished."""
        with self.poll_lock:  # one buffer, one reaper at a time
            buf = self.poll_buf
            if timeout_ms > 0:
                n = _lib.xfer_cq_wait(self.h, addressof(buf), _REAP_BATCH, timeout_ms)
            else:
                n = _lib.xfer_cq_poll(self.h, addressof(buf), _REAP_BATCH)
            if n == _E_TIMEDOUT or n == 0:
                n = 0
            else:
                check(n, "xfer_cq_wait")
                raw = _string_at(addressof(buf), n * 16)
        done = self.dispatch(raw) if n else 0
        if self.down_signal is not None:
            self.check_peers_down()
        return done

    def drain(self) -> None:
        """Dispatches everything the completion queue holds now."""
        while self.progress(0):
            pass

    def reaper_main(self) -> None:
        buf = (_lib.xfer_cqe * _REAP_BATCH)()
        a = addressof(buf)
        h = self.h
        cq_wait = _lib.xfer_cq_wait
        sig = self.down_signal
        ticks = 0
        while not self.stopping:
            ticks += 1
            if ticks % 25 == 0 and (self.zombies or self.zombie_groups):
                self.retry_zombies()
            n = cq_wait(h, a, _REAP_BATCH, _REAP_SLICE_MS)
            if n > 0:
                self.dispatch(_string_at(a, n * 16))
            elif n != _E_TIMEDOUT:
                log.error("xfer: xfer_cq_wait failed: %s", _lib.strerror(n))
                time.sleep(0.01)
            if sig is not None and sig.take():
                self.peers_down()

    def check_peers_down(self) -> None:
        sig = self.down_signal
        if sig is not None and sig.take():
            self.peers_down()

    def peers_down(self) -> None:
        """The worker posted the peer-down signal: call on_peer_down for every
        peer newly dead, after dispatching the completions it delivered first."""
        while self.down_signal is not None and self.down_signal.take():
            pass  # one scan covers every post so far
        self.drain()
        with self.ctl:
            dead = []
            for idx, (eid, ref) in list(self.peers.items()):
                if idx in self.down_reported:
                    continue
                if _lib.xfer_peer_state(self.h, idx) == _lib.XFER_PEER_DEAD:
                    self.down_reported.add(idx)
                    dead.append((idx, eid, ref()))
        cb = self.on_peer_down
        for idx, eid, peer in dead:
            err = PeerError(
                _lib.XFER_EPEER, f"peer {idx} (engine {eid:016x}) was declared dead", "on_peer_down"
            )
            if cb is None:
                continue
            try:
                cb(peer if peer is not None else idx, err)
            except Exception:  # noqa: BLE001
                log.exception("xfer: exception in on_peer_down callback")

    def wait_for(self, op: Completion, timeout: Optional[float]) -> bool:
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        if self.manual:
            if self.zombies or self.zombie_groups:
                self.retry_zombies()
            while not op._done:
                left = _WAIT_SLICE_S if deadline is None else deadline - time.monotonic()
                if left <= 0 or self.stopped:
                    return op._done
                self.progress(max(1, int(min(left, _WAIT_SLICE_S) * 1000)))
            return True
        with self.cv:
            self.waiters += 1
            try:
                while not op._done:
                    if deadline is None:
                        self.cv.wait(_WAIT_SLICE_S)
                    else:
                        left = deadline - time.monotonic()
                        if left <= 0:
                            return False
                        self.cv.wait(min(left, _WAIT_SLICE_S))
            finally:
                self.waiters -= 1
        return True

    def track(self, op: "Completion", callback: Optional["CompletionCallback"]) -> None:
        """Registers ``op`` before its C call: the worker may deliver its
        completion before the call returns."""
        if callback is not None:
            op._cbs = [callback]
        self.pending[op.user_data] = op

    def submit_failed(self, ud: int, rc: int, op: str) -> Error:
        self.pending.pop(ud, None)
        if self.stopped:
            # Whatever the library checked first (a peer it marked dead as it
            # stopped, a region it released), a stopped engine says so.
            return _shutdown(op)
        return error_for(rc, op)

    # -- lifecycle
    def stop(self) -> None:
        """xfer_engine_stop, then every Completion is done: what was in flight
        ends as the library reports it (Cancelled for what it cut short)."""
        if os.getpid() != self.pid:  # a forked child owns no worker thread
            return
        with self.ctl:
            if self.stopped:
                return
            self.stopped = True
        # Cancels what is in flight (completions -ECANCELED) while the reaper still reaps.
        _lib.xfer_engine_stop(self.h)
        self.stopping = True
        me = threading.current_thread()
        for t in (self.reaper, self.receiver):
            if t is not None and t is not me:
                t.join()
        # The queue stays readable after stop: drain it here.
        buf = (_lib.xfer_cqe * _REAP_BATCH)()
        while True:
            n = _lib.xfer_cq_poll(self.h, addressof(buf), _REAP_BATCH)
            if n <= 0:
                break
            self.dispatch(_string_at(addressof(buf), n * 16))
        if self.down_signal is not None:
            self.peers_down()  # a peer that died just before the stop
            sig, self.down_signal = self.down_signal, None
            sig.close()  # the worker is gone: nothing posts any more
        for ud in list(self.pending):
            op = self.pending.pop(ud, None)
            if op is not None:
                op._res, op._keep, op._done = -_errno.ECANCELED, None, True
                with self.cb_lock:
                    cbs, op._cbs = op._cbs, None
                for fn in cbs or ():
                    _run_callback(fn, op)
        with self.cv:
            self.cv.notify_all()

    def close(self) -> None:
        if os.getpid() != self.pid:
            return
        self.stop()
        with self.ctl:
            if self.closed:
                return
            self.closed = True
        # Nothing can land any more (stop released every registration on the
        # NICs). Handles become unusable now, but no C object is freed here:
        # another thread may be about to pass one to the library. Remote
        # regions are freed when their objects go, regions by the engine's
        # destruction, once no Python object can reach the engine.
        with self.ctl:
            for ref in self.mrs.values():
                r = ref()
                if r is not None:
                    r._h = None
                    r._keep = None
                    r._fin.detach()
            self.mrs.clear()
            self.zombies.clear()
            for h, rref in self.rmrs.items():
                rr = rref()
                if rr is not None:
                    rr._h = None
                self.orphan_rmrs.add(h)
            self.rmrs.clear()
            # The worker released every group reference when it stopped.
            for h, _keep in self.zombie_groups:
                _lib.xfer_group_destroy(h)
            self.zombie_groups.clear()

    def retry_zombies(self) -> None:
        with self.ctl:
            left = []
            for h, keep in self.zombies:
                if self.dereg(h) == -_errno.EBUSY:
                    left.append((h, keep))
            self.zombies = left
            groups = []
            for h, keep in self.zombie_groups:
                if _lib.xfer_group_destroy(h) == -_errno.EBUSY:
                    groups.append((h, keep))
            self.zombie_groups = groups

    def free_rmr(self, h: int) -> None:
        with self.ctl:
            if self.rmrs.pop(h, None) is not None or h in self.orphan_rmrs:
                self.orphan_rmrs.discard(h)
                _lib.xfer_rmr_free(h)

    def dereg(self, h: int) -> int:
        with self.ctl:
            if h not in self.mrs:
                return 0
            rc = _lib.xfer_mr_dereg(h)
            if rc == 0:
                del self.mrs[h]
            return rc


def _shutdown(op: str) -> Shutdown:
    return Shutdown(_errno.ESHUTDOWN, "the engine is stopped or closed", op)


def cuda_available() -> bool:
    """True when libxfer can use a CUDA driver and GPU here (``xfer_cuda_available``):
    then :meth:`Engine.register` takes CUDA memory."""
    if _lib.xfer_cuda_available is None:
        return False
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
    if mem.device.type != "cuda" or _lib.xfer_cuda_available is None:
        raise NotSupported(
            _errno.EOPNOTSUPP,
            f"cannot register {mem.device} memory: this libxfer registers host memory only "
            + ("" if mem.device.type != "cuda" else "(it has no CUDA support); ")
            + "copy to a host buffer, e.g. tensor.cpu() or pinned memory",
            op,
        )
    if not cuda_available():
        raise NoGPU(
            _lib.XFER_ENOGPU,
            f"cannot register {mem.device} memory: no usable CUDA driver or GPU here (xfer_cuda_available)",
            op,
        )


def _destroy(h: int, pid: int, keep: Any = None) -> None:
    if os.getpid() == pid:
        _lib.xfer_engine_destroy(h)


# ------------------------------------------------------------ regions, peers


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
        if h is None or _lib.xfer_mr_is_gpu is None:
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
        if _lib.xfer_mr_revoke is None:
            raise NotSupported(_errno.EOPNOTSUPP, "this libxfer has no xfer_mr_revoke", "revoke")
        if self._core.stopped:
            raise _shutdown("xfer_mr_revoke")
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


def _region_gone(core: _Core, h: int, keep: Any) -> None:
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

    def __init__(self, core: _Core, h: int, peer: "Peer"):
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


class Peer:
    """A remote engine added with :meth:`Engine.add_peer`."""

    __slots__ = ("_core", "engine", "index", "id", "_removed", "__weakref__")

    def __init__(self, engine: "Engine", index: int):
        self._core = engine._core
        self.engine = engine
        self.index = index
        self.id = int(_lib.xfer_peer_id(self._core.h, index))
        self._removed = False

    @property
    def state(self) -> str:
        """``xfer_peer_state``: ``"live"``; ``"dead"`` once the engine declared it
        failed (its probes failed or went unanswered for ``heartbeat_ms *
        heartbeat_misses``): pending operations to it completed with
        :class:`xfer.PeerError`, new ones raise it at once, until it is
        removed; or ``"removed"``."""
        if self._removed:
            return "removed"
        if _lib.xfer_peer_state is None:
            return "live"
        s = _lib.xfer_peer_state(self._core.h, self.index)
        return {_lib.XFER_PEER_LIVE: "live", _lib.XFER_PEER_DEAD: "dead"}.get(s, "removed")

    @property
    def alive(self) -> bool:
        """``state == "live"``."""
        return self.state == "live"

    @property
    def shards(self) -> int:
        """``xfer_peer_shards``: how many times one sharded write
        (``flags=xfer.F_SHARD``) to this peer delivers its immediate —
        min(our NIC count, the peer's); 0 once removed."""
        if self._removed:
            return 0
        if _lib.xfer_peer_shards is None:
            return 1
        return int(_lib.xfer_peer_shards(self._core.h, self.index))

    def import_region(self, descriptor: BytesLike) -> RemoteRegion:
        return self.engine.import_region(self, descriptor)

    def send(self, data: Any, **kw: Any) -> Completion:
        return self.engine.send(self, data, **kw)

    def write_imm(self, imm: int, **kw: Any) -> Completion:
        return self.engine.write_imm(self, imm, **kw)

    def remove(self) -> None:
        """Forgets the peer; :class:`xfer.Busy` while operations to it are in flight."""
        if self._removed:
            return
        core = self._core
        with core.ctl:
            check(_lib.xfer_peer_remove(core.h, self.index), "xfer_peer_remove")
            self._removed = True
            ref = core.peers_by_id.get(self.id)
            if ref is not None and ref() is self:
                del core.peers_by_id[self.id]
            core.peers.pop(self.index, None)
            core.down_reported.discard(self.index)

    def __repr__(self) -> str:
        return f"<xfer.Peer {self.index} id={self.id:016x}>"


class Group:
    """A fixed set of peers for :meth:`Engine.scatter` and :meth:`Engine.barrier`
    (``xfer_group_create``), made by :meth:`Engine.group`.

    ``members`` lists its peers in order: a scatter entry names its target by
    index into it. ``len(group)`` is ``xfer_group_size``. Close it (or use it
    as a context manager) to free it — :class:`xfer.Busy` while a scatter or
    barrier on it is in flight; a collected group frees itself.
    """

    __slots__ = ("_core", "_h", "_fin", "_lingering", "engine", "members", "__weakref__")

    def __init__(self, engine: "Engine", h: int, members: List["Peer"]):
        self._core = engine._core
        self._h: Optional[int] = h
        self.engine = engine
        self.members: Tuple[Peer, ...] = tuple(members)
        # Arrays of scatters that completed early (deadline): the worker may
        # still write their status and read their entries until it drains
        # them, which is over once the group can be destroyed.
        self._lingering: List[Any] = []
        self._fin = weakref.finalize(self, _group_gone, self._core, h, self._lingering)
        self._fin.atexit = False

    @property
    def closed(self) -> bool:
        return self._h is None

    @property
    def size(self) -> int:
        """``xfer_group_size``: how many members (each expects this many arrivals
        when every member barriers on the same immediate)."""
        h = self._h
        return int(_lib.xfer_group_size(h)) if h is not None else len(self.members)

    def __len__(self) -> int:
        return self.size

    def index(self, peer: "Peer") -> int:
        """The member index of ``peer`` (its first occurrence)."""
        for i, p in enumerate(self.members):
            if p is peer:
                return i
        raise InvalidArgument(_errno.EINVAL, f"{peer!r} is not a member of this group", "xfer_scatter")

    def scatter(self, src: Optional["Region"], entries: Iterable[Any], **kw: Any) -> "ScatterCompletion":
        """:meth:`Engine.scatter` on this group."""
        return self.engine.scatter(self, src, entries, **kw)

    def barrier(self, imm: int, **kw: Any) -> Completion:
        """:meth:`Engine.barrier` on this group."""
        return self.engine.barrier(self, imm, **kw)

    def close(self) -> None:
        """Frees the group (idempotent). Raises :class:`xfer.Busy` while a
        scatter or barrier on it is in flight."""
        h = self._h
        if h is None:
            return
        with self._core.ctl:
            rc = _lib.xfer_group_destroy(h)
            if rc < 0:
                raise error_for(rc, "xfer_group_destroy")
            self._fin.detach()
            self._h = None
            self._lingering.clear()

    def __enter__(self) -> "Group":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = " closed" if self._h is None else ""
        return f"<xfer.Group of {len(self.members)} peers{state}>"


def _group_gone(core: _Core, h: int, lingering: List[Any]) -> None:
    """A Group was collected without close(): free it, or keep what its
    scatters still use until the worker lets it go."""
    if os.getpid() != core.pid:
        return
    with core.ctl:
        if _lib.xfer_group_destroy(h) == -_errno.EBUSY:
            core.zombie_groups.append((h, lingering))


class ScatterEntry(NamedTuple):
    """One slice of a scatter: ``nbytes`` from ``src_offset`` of the source
    region to ``dst_offset`` of ``dst``, a region of group member ``member``
    (its index in ``Group.members``, or the Peer itself). ``nbytes`` 0
    delivers only the immediate."""

    member: Union[int, "Peer"]
    dst: "RemoteRegion"
    nbytes: int
    src_offset: int = 0
    dst_offset: int = 0


class ScatterCompletion(Completion):
    """The completion of :meth:`Engine.scatter`: the first error of its
    entries, and each entry's own result in :attr:`statuses`."""

    __slots__ = ("_status",)

    def __init__(self, core: "_Core", user_data: int, keep: Any, status: Any):
        super().__init__(core, user_data, _lib.XFER_OP_SCATTER, keep)
        self._status = status

    @property
    def statuses(self) -> Optional[List[int]]:
        """Each entry's result (0 or -errno), filled by the library before the
        completion; None while in flight or when submitted with ``status=False``."""
        if not self._done or self._status is None:
            return None
        return list(self._status)

    def entry_errors(self, timeout: Optional[float] = None) -> List[Optional[Error]]:
        """Waits like :meth:`result`, then returns each entry's error (None where it succeeded)."""
        if not self._done and not self._core.wait_for(self, timeout):
            raise TimeoutError(_errno.ETIMEDOUT, f"scatter not complete after {timeout} s", "wait")
        if self._status is None:
            raise InvalidArgument(_errno.EINVAL, "submitted with status=False", "entry_errors")
        return [error_for(r, "scatter entry") if r < 0 else None for r in self._status]


# -------------------------------------------------------------------- engine

_ATTR_INTS = (
    "worker_cpu",
    "submit_depth",
    "max_ops",
    "recv_count",
    "msg_max",
    "imm_slots",
    "max_regions",
    "spin_us",
    "timeout_ms",
    "log_level",
    "heartbeat_ms",
    "heartbeat_misses",
)


class Engine:
    """One xfer engine: a worker thread owning one or more NICs.

    Keyword arguments mirror ``struct xfer_attr`` (None keeps the library
    default, after the ``XFER_*`` environment variables): ``provider``
    ("auto", "tcp", "shm", "verbs", "efa" or a full name), ``nics`` (a
    comma-separated string or a list: ``"lo"``), ``worker_cpu`` (a CPU,
    -1 unpinned, or ``"auto"``/``xfer.CPU_AUTO``: near the first NIC),
    ``submit_depth``, ``max_ops``, ``recv_count``, ``msg_max``, ``imm_slots``,
    ``max_regions``, ``spin_us``, ``timeout_ms`` (default deadline of operations),
    ``log_level``, ``heartbeat_ms``, ``heartbeat_misses``.

    Python-side options:

    * ``on_recv(message)``: receive by callback (on a dedicated thread)
      instead of :meth:`recv`.
    * ``on_peer_down(peer, error)``: called once per peer the engine declares
      dead (``heartbeat_ms * heartbeat_misses`` without an answer to its
      probes), after the operations it failed have completed; ``peer`` is the
      :class:`Peer` (its index if that object is gone), ``error`` a
      :class:`xfer.PeerError`. It runs on the reaper thread (in
      :meth:`progress` without one): the C worker only posts a semaphore.
    * ``progress_thread`` (default True): a reaper thread turns C completions
      into :class:`Completion` results. With False, completions advance only
      inside :meth:`progress` and blocking waits.

    Use it as a context manager, or call :meth:`close`.
    """

    def __init__(
        self,
        provider: Optional[str] = None,
        nics: Union[str, Sequence[str], None] = None,
        *,
        worker_cpu: Union[int, str, None] = None,
        submit_depth: Optional[int] = None,
        max_ops: Optional[int] = None,
        recv_count: Optional[int] = None,
        msg_max: Optional[int] = None,
        imm_slots: Optional[int] = None,
        max_regions: Optional[int] = None,
        spin_us: Optional[int] = None,
        timeout_ms: Optional[int] = None,
        log_level: Optional[int] = None,
        heartbeat_ms: Optional[int] = None,
        heartbeat_misses: Optional[int] = None,
        on_recv: Optional[Callable[[Message], Any]] = None,
        on_peer_down: Optional[Callable[..., Any]] = None,
        progress_thread: bool = True,
    ):
        a = _lib.defaults()
        self._strings = []  # keep the char* alive during create
        if provider is not None:
            b = str(provider).encode()
            self._strings.append(b)
            a.provider = b
        if nics is not None:
            s = nics if isinstance(nics, str) else ",".join(nics)
            b = s.encode()
            self._strings.append(b)
            a.nics = b
        if worker_cpu == "auto":
            worker_cpu = _lib.XFER_CPU_AUTO
        given = locals()
        for name in _ATTR_INTS:
            v = given[name]
            if v is not None:
                if not isinstance(v, int) or isinstance(v, bool) or (v < 0 and name not in ("worker_cpu", "log_level")) or (
                    name == "worker_cpu" and v < _lib.XFER_CPU_AUTO
                ):
                    raise InvalidArgument(_errno.EINVAL, f"{name} must be a non-negative int, not {v!r}", "Engine")
                try:
                    setattr(a, name, v)
                except (TypeError, OverflowError) as ex:
                    raise InvalidArgument(_errno.EINVAL, f"{name}={v!r}: {ex}", "Engine") from None
        down_signal = None
        if on_peer_down is not None:
            if not callable(on_peer_down):
                raise InvalidArgument(_errno.EINVAL, "on_peer_down must be callable", "Engine")
            # The worker thread only posts a semaphore (see _lib.PeerDownSignal):
            # it never waits for the GIL. The reaper thread (or progress())
            # calls on_peer_down.
            down_signal = _lib.PeerDownSignal()
            a.on_peer_down = down_signal.callback
            a.on_peer_down_ctx = down_signal.addr
        out = c_void_p()
        check(_lib.xfer_engine_create(byref(a), byref(out)), "xfer_engine_create")
        assert out.value is not None
        core = self._core = _Core(out.value, not progress_thread)
        # The semaphore goes with the C engine (its last user), not before.
        self._destroyer = weakref.finalize(core, _destroy, core.h, core.pid, down_signal)
        if down_signal is not None:
            core.down_signal = down_signal
            core.on_peer_down = on_peer_down
        self.msg_max = int(a.msg_max)
        self.timeout_ms = int(a.timeout_ms)
        self.id = int(_lib.xfer_engine_id(core.h))
        self.provider = (_lib.xfer_engine_provider(core.h) or b"").decode()
        self.nics = [
            (_lib.xfer_engine_nic_name(core.h, i) or b"").decode()
            for i in range(_lib.xfer_engine_nic_count(core.h))
        ]
        core.nic_infos = [self._read_nic_info(i) for i in range(len(self.nics))]
        self.address = self._address()
        self._on_recv = on_recv
        if progress_thread:
            core.reaper = threading.Thread(target=core.reaper_main, name=f"xfer-reaper-{self.id:x}", daemon=True)
            core.reaper.start()
        if on_recv is not None:
            core.receiver = threading.Thread(
                target=_receiver_main, args=(weakref.ref(self), core, on_recv), name=f"xfer-recv-{self.id:x}", daemon=True
            )
            core.receiver.start()
        self._closer = weakref.finalize(self, core.close)

    # -- identity
    def _address(self) -> bytes:
        buf = ctypes.create_string_buffer(_lib.XFER_ADDR_MAX)
        n = check(_lib.xfer_engine_addr(self._core.h, buf, len(buf), None), "xfer_engine_addr")
        return buf.raw[:n]

    def _read_nic_info(self, i: int) -> NicInfo:
        name = self.nics[i]
        if _lib.xfer_engine_nic_info is None:  # an older libxfer
            return NicInfo(i, self.provider, name, 0, 0, 0, True, "staged")
        info = _lib.xfer_nic_info()
        check(_lib.xfer_engine_nic_info(self._core.h, i, byref(info)), "xfer_engine_nic_info")
        return NicInfo(
            i,
            info.provider.decode("utf-8", "replace"),
            info.domain.decode("utf-8", "replace"),
            int(info.tx_depth),
            int(info.rx_depth),
            int(info.max_msg),
            bool(info.delivery_complete),
            (info.gpu_path or b"").decode("utf-8", "replace"),
        )

    def nic_info(self, index: int = 0) -> NicInfo:
        """``xfer_engine_nic_info`` of NIC ``index`` (read once, at creation).

        ``delivery_complete`` says whether a write completes only once its data
        is at the target (tcp) or already once sent (shm, where a write the
        target refuses is not reported to the writer)."""
        infos = self._core.nic_infos
        if not isinstance(index, int) or not 0 <= index < len(infos):
            raise InvalidArgument(_errno.EINVAL, f"no NIC {index!r}: the engine has {len(infos)}", "xfer_engine_nic_info")
        return infos[index]

    @property
    def nic_infos(self) -> List[NicInfo]:
        """:meth:`nic_info` of every NIC, in order (``nics`` holds their names)."""
        return list(self._core.nic_infos)

    def __repr__(self) -> str:
        core = self._core
        state = " closed" if core.closed else " stopped" if core.stopped else ""
        return f"<xfer.Engine {self.id:016x} {self.provider} on {','.join(self.nics)}{state}>"

    # -- lifecycle
    def stop(self) -> None:
        """Stops the worker (``xfer_engine_stop``) but keeps the objects.

        Submissions not yet taken and requests not yet posted complete with
        :class:`xfer.Cancelled`; posted requests get up to 2 s to finish with
        their own result (Cancelled if abandoned). Once this returns every
        Completion is done, nothing lands any more, and every later submission,
        registration, peer or group call raises :class:`xfer.Shutdown`.
        Regions, groups and imported regions can still be closed; peers'
        ``state`` can still be read. Idempotent; :meth:`close` does this first.
        """
        self._core.stop()

    @property
    def stopped(self) -> bool:
        """True once :meth:`stop` (or :meth:`close`) ran."""
        return self._core.stopped

    def close(self) -> None:
        """:meth:`stop`, then releases every region and imported region (their
        objects become closed). Later calls raise :class:`xfer.Shutdown`. Idempotent."""
        self._closer()

    @property
    def closed(self) -> bool:
        return self._core.closed

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- peers
    def add_peer(self, address: BytesLike) -> Peer:
        """Parses a peer's address bytes (untrusted) and makes it reachable."""
        core = self._core
        a = bytes(address)
        if core.stopped:
            raise _shutdown("xfer_peer_add")
        idx = c_uint32()
        with core.ctl:
            check(_lib.xfer_peer_add(core.h, a, len(a), byref(idx)), "xfer_peer_add")
            p = Peer(self, idx.value)
            ref = weakref.ref(p)
            core.peers_by_id[p.id] = ref
            core.peers[p.index] = (p.id, ref)
            core.down_reported.discard(p.index)
        return p

    def group(self, peers: Iterable[Peer]) -> Group:
        """A :class:`Group` of these peers, in this order, for :meth:`scatter`
        and :meth:`barrier` (``xfer_group_create``). A peer may be this
        engine itself (added by its own address), e.g. for a barrier in which
        every member takes part."""
        core = self._core
        if _lib.xfer_group_create is None:
            raise NotSupported(_errno.EOPNOTSUPP, "this libxfer has no peer groups", "xfer_group_create")
        members = list(peers)
        for p in members:
            if not isinstance(p, Peer) or p._core is not core:
                raise InvalidArgument(_errno.EINVAL, f"{p!r} is not a Peer of this engine", "xfer_group_create")
        if not members:
            raise InvalidArgument(_errno.EINVAL, "a group needs at least one peer", "xfer_group_create")
        if core.stopped:
            raise _shutdown("xfer_group_create")
        idx = (c_uint32 * len(members))(*[p.index for p in members])
        out = c_void_p()
        with core.ctl:
            check(_lib.xfer_group_create(core.h, idx, len(members), byref(out)), "xfer_group_create")
        return Group(self, int(out.value or 0), members)

    def import_region(self, peer: Peer, descriptor: BytesLike) -> RemoteRegion:
        """Parses a region descriptor (untrusted bytes) that must belong to ``peer``."""
        core = self._core
        if not isinstance(peer, Peer) or peer._core is not core:
            raise InvalidArgument(_errno.EINVAL, "peer is not a Peer of this engine", "xfer_rmr_import")
        d = bytes(descriptor)
        out = c_void_p()
        if core.stopped:
            raise _shutdown("xfer_rmr_import")
        with core.ctl:
            check(_lib.xfer_rmr_import(core.h, peer.index, d, len(d), byref(out)), "xfer_rmr_import")
            h = int(out.value or 0)
            rr = RemoteRegion(core, h, peer)
            core.rmrs[h] = weakref.ref(rr)
        return rr

    # -- memory
    def register(self, obj: Any, nbytes: Optional[int] = None, *, device: DeviceLike = None) -> Region:
        """Registers memory for local and remote access; returns a :class:`Region`.

        ``obj`` is a numpy array, torch tensor, bytearray, memoryview, any
        buffer-protocol, DLPack or CUDA-array-interface object, a raw
        ``(ptr, nbytes)`` tuple, or an int address with ``nbytes``. It must be
        writable and contiguous. ``device`` (``"cpu"``, ``"cuda:0"``, ...)
        states or checks where the memory lives. Device memory raises
        :class:`xfer.NotSupported` until libxfer can register it.
        """
        if isinstance(obj, int) and not isinstance(obj, bool):
            if nbytes is None:
                raise InvalidArgument(_errno.EINVAL, "a raw address needs nbytes", "register")
            obj = (obj, int(nbytes))
        elif nbytes is not None:
            raise InvalidArgument(_errno.EINVAL, "nbytes is only for raw addresses; slice the object instead", "register")
        mem = resolve(obj, device)
        return self._register_memory(mem, obj)

    def register_ptr(self, ptr: int, nbytes: int, device: DeviceLike = "cpu") -> Region:
        """Registers raw memory ``[ptr, ptr + nbytes)``; the caller keeps it alive."""
        return self._register_memory(resolve((int(ptr), int(nbytes)), device), None)

    def _register_memory(self, mem: Memory, obj: Any) -> Region:
        core = self._core
        check_device(mem, "register")
        if core.stopped:
            raise _shutdown("xfer_mr_reg")
        out = c_void_p()
        with core.ctl:
            check(_lib.xfer_mr_reg(core.h, mem.ptr, mem.nbytes, byref(out)), "xfer_mr_reg")
            h = int(out.value or 0)
            try:
                buf = ctypes.create_string_buffer(_lib.XFER_DESC_MAX)
                n = check(_lib.xfer_mr_desc(h, buf, len(buf), None), "xfer_mr_desc")
            except Error:
                _lib.xfer_mr_dereg(h)
                raise
            r = Region(self, h, mem, obj, buf.raw[:n])
            core.mrs[h] = weakref.ref(r)
        return r

    @property
    def region_count(self) -> int:
        """How many regions are registered now (a leak shows up here)."""
        return len(self._core.mrs)

    @property
    def remote_region_count(self) -> int:
        """How many imported remote regions hold a C handle now."""
        return len(self._core.rmrs)

    @property
    def pending_count(self) -> int:
        """Operations submitted from Python and not yet completed."""
        return len(self._core.pending)

    # -- operations
    def write(
        self,
        src: Optional[Region],
        dst: RemoteRegion,
        nbytes: Optional[int] = None,
        *,
        src_offset: int = 0,
        dst_offset: int = 0,
        imm: Optional[int] = None,
        flags: int = 0,
        timeout_ms: int = 0,
        tag: int = 0,
        signal: Optional[SignalSpec] = None,
        callback: Optional[CompletionCallback] = None,
    ) -> Completion:
        """One-sided WRITE of ``nbytes`` (default: the rest of ``src``) into ``dst``.

        With ``imm`` the write delivers that 32-bit immediate once it has
        landed. ``src=None`` with ``nbytes`` 0 is an immediate-only write
        into ``dst``. ``timeout_ms`` (0: engine default) is the operation's
        deadline; ``tag`` groups operations for :meth:`cancel`.

        ``signal=(target, value)`` — on this and every other operation — has
        the worker store ``value`` into a 64-bit word just before the
        completion is delivered (whatever its result), so that a GPU kernel
        or another thread polling that word can go on without the completion
        queue. ``target`` is a :class:`xfer.Signal` (or what ``Signal()``
        takes: host memory, an int address); the Completion keeps it alive.
        """
        core = self._core
        try:
            s_h = src._h if src is not None else 0
            d_h = dst._h
        except AttributeError:
            raise InvalidArgument(_errno.EINVAL, "write(src: Region | None, dst: RemoteRegion, ...)", "xfer_write") from None
        if s_h is None or d_h is None:  # a closed region: never let it pass as "no source"
            raise _closed(core, "xfer_write", src, dst)
        if nbytes is None:
            nbytes = src.nbytes - src_offset if src is not None else 0
        if imm is not None:
            _check_imm(imm, "xfer_write")
            flags |= 1
        sa = sv = 0
        sk = None
        if signal is not None:
            sa, sv, sk = signal_args(signal, "xfer_write")
        ud = next(core.ids)
        sc = core.scratch
        buf = sc.buf
        try:
            _pack_w(buf, 0, s_h, src_offset, d_h, dst_offset, nbytes, imm or 0, flags)
            _pack_c(buf, _OFF_C, ud, 0, 0, timeout_ms, tag, sa, sv)
        except struct.error as ex:
            raise _bad_values("xfer_write", ex) from None
        op = Completion(core, ud, 2, (src, dst, sk))
        core.track(op, callback)
        rc = _lib.xfer_write(core.h, sc.aw, sc.ac)
        if rc:
            core.pending.pop(ud, None)
            raise _shutdown("xfer_write") if core.stopped else _explain(rc, "xfer_write", src, dst)
        return op

    def write_paged(
        self,
        src: Region,
        dst: RemoteRegion,
        src_pages: Any,
        dst_pages: Any,
        page_len: int,
        *,
        src_stride: Optional[int] = None,
        dst_stride: Optional[int] = None,
        src_base: int = 0,
        dst_base: int = 0,
        imm: Optional[int] = None,
        flags: int = 0,
        timeout_ms: int = 0,
        tag: int = 0,
        signal: Optional[SignalSpec] = None,
        callback: Optional[CompletionCallback] = None,
    ) -> Completion:
        """Paged WRITE: page i goes from ``src_base + src_pages[i]*src_stride``
        to ``dst_base + dst_pages[i]*dst_stride``, ``page_len`` bytes each.

        Index arrays are numpy/torch int32 or uint32 arrays (passed by
        pointer, kept alive until completion) or sequences of ints. Strides
        default to ``page_len``. With ``imm`` every page delivers it once, so
        the receiver expects ``len(src_pages)`` arrivals. ``signal=`` as in
        :meth:`write`.
        """
        core = self._core
        sp, n, sk = index_array(src_pages)
        dp, m, dk = index_array(dst_pages)
        if n != m:
            raise InvalidArgument(_errno.EINVAL, f"{n} source pages but {m} destination pages", "xfer_write_paged")
        if n > 0xFFFFFFFF:
            raise InvalidArgument(_errno.EINVAL, "more than 2^32-1 pages", "xfer_write_paged")
        try:
            s_h = src._h
            d_h = dst._h
        except AttributeError:
            raise InvalidArgument(_errno.EINVAL, "write_paged(src: Region, dst: RemoteRegion, ...)", "xfer_write_paged") from None
        if s_h is None or d_h is None:
            raise _closed(core, "xfer_write_paged", src, dst)
        if imm is not None:
            _check_imm(imm, "xfer_write_paged")
            flags |= 1
        sa = sv = 0
        sig = None
        if signal is not None:
            sa, sv, sig = signal_args(signal, "xfer_write_paged")
        ud = next(core.ids)
        sc = core.scratch
        buf = sc.buf
        try:
            _pack_pw(
                buf, _OFF_PW, s_h, d_h, page_len,
                sp, page_len if src_stride is None else src_stride, src_base,
                dp, page_len if dst_stride is None else dst_stride, dst_base,
                n, imm or 0, flags,
            )
            _pack_c(buf, _OFF_C, ud, 0, 0, timeout_ms, tag, sa, sv)
        except struct.error as ex:
            raise _bad_values("xfer_write_paged", ex) from None
        op = Completion(core, ud, 3, (src, dst, sk, dk, sig))
        core.track(op, callback)
        rc = _lib.xfer_write_paged(core.h, sc.apw, sc.ac)
        if rc:
            core.pending.pop(ud, None)
            raise _shutdown("xfer_write_paged") if core.stopped else _explain(rc, "xfer_write_paged", src, dst)
        return op

    def write_imm(
        self,
        peer: Peer,
        imm: int,
        *,
        timeout_ms: int = 0,
        tag: int = 0,
        signal: Optional[SignalSpec] = None,
        callback: Optional[CompletionCallback] = None,
    ) -> Completion:
        """Delivers the 32-bit immediate ``imm`` once to ``peer``, with no data
        (``signal=`` as in :meth:`write`)."""
        core = self._core
        if getattr(peer, "_core", None) is not core:
            raise InvalidArgument(_errno.EINVAL, "peer is not a Peer of this engine", "xfer_write_imm")
        _check_imm(imm, "xfer_write_imm")
        ud, sk = _pack_completion(core, "xfer_write_imm", timeout_ms, tag, signal)
        op = Completion(core, ud, 4, sk)
        core.track(op, callback)
        rc = _lib.xfer_write_imm(core.h, peer.index, imm, core.scratch.ac)
        if rc:
            raise core.submit_failed(ud, rc, "xfer_write_imm")
        return op

    def scatter(
        self,
        group: Group,
        src: Optional[Region],
        entries: Iterable[Any],
        *,
        imm: Optional[int] = None,
        flags: int = 0,
        status: bool = True,
        timeout_ms: int = 0,
        tag: int = 0,
        signal: Optional[SignalSpec] = None,
        callback: Optional[CompletionCallback] = None,
    ) -> ScatterCompletion:
        """One call, a different slice of ``src`` to each entry's member (``xfer_scatter``).

        ``entries`` are :class:`ScatterEntry` values or tuples ``(member, dst,
        nbytes[, src_offset[, dst_offset]])``: ``member`` indexes
        ``group.members`` (or is the Peer), ``dst`` is a RemoteRegion of that
        member. ``nbytes`` 0 delivers only the immediate; ``src`` may be None
        when every entry is 0 bytes. With ``imm`` each entry delivers it once to
        its member. The completion carries the first error of the entries;
        with ``status`` (default) :attr:`ScatterCompletion.statuses` gives each
        entry's own result. One member's failure does not stop the others.
        ``signal=`` as in :meth:`write`: stored once, when the whole scatter completes.
        """
        core = self._core
        op_name = "xfer_scatter"
        if _lib.xfer_scatter_submit is None:
            raise NotSupported(_errno.EOPNOTSUPP, "this libxfer has no xfer_scatter", op_name)
        if not isinstance(group, Group) or group._core is not core:
            raise InvalidArgument(_errno.EINVAL, "group is not a Group of this engine", op_name)
        g_h = group._h
        s_h: Optional[int]
        if src is None:
            s_h = 0
        elif not isinstance(src, Region):
            raise InvalidArgument(_errno.EINVAL, "src must be a Region or None", op_name)
        else:
            s_h = src._h
        if g_h is None or s_h is None:
            if core.stopped:
                raise _shutdown(op_name)
            raise InvalidArgument(_errno.EINVAL, "the group is closed" if g_h is None else "the source region is closed", op_name)
        ents = list(entries)
        n = len(ents)
        if n == 0 or n > 0xFFFFFFFF:
            raise InvalidArgument(_errno.EINVAL, "a scatter needs 1 .. 2^32-1 entries", op_name)
        table = bytearray(n * _SE.size)
        dsts: List[RemoteRegion] = []
        try:
            for i, e in enumerate(ents):
                try:
                    member, dst, nbytes, src_off, dst_off = ScatterEntry(*e)
                except TypeError:
                    raise InvalidArgument(
                        _errno.EINVAL, f"entry {i}: give (member, dst, nbytes[, src_offset[, dst_offset]])", op_name
                    ) from None
                if isinstance(member, Peer):
                    member = group.index(member)
                if not isinstance(dst, RemoteRegion):
                    raise InvalidArgument(_errno.EINVAL, f"entry {i}: dst must be a RemoteRegion", op_name)
                if dst._h is None:
                    if core.stopped:
                        raise _shutdown(op_name)
                    raise InvalidArgument(_errno.EINVAL, f"entry {i}: the destination region is closed", op_name)
                _pack_se(table, i * _SE.size, member, src_off, nbytes, dst._h, dst_off)
                dsts.append(dst)
        except (TypeError, struct.error) as ex:
            raise _bad_values(op_name, ex) from None
        if imm is not None:
            _check_imm(imm, op_name)
            flags |= _lib.XFER_F_IMM
        sa = sv = 0
        sig = None
        if signal is not None:
            sa, sv, sig = signal_args(signal, op_name)
        anchor = ctypes.c_char.from_buffer(table)
        st = (ctypes.c_int32 * n)() if status else None
        ud = next(core.ids)
        # The scatter and completion structs are copied by the call.
        args = bytearray(_SC.size + _C.size)
        try:
            _SC.pack_into(args, 0, s_h, addressof(anchor), n, imm or 0, flags, addressof(st) if st is not None else 0)
            _pack_c(args, _SC.size, ud, 0, 0, timeout_ms, tag, sa, sv)
        except struct.error as ex:
            raise _bad_values(op_name, ex) from None
        a_args = addressof(ctypes.c_char.from_buffer(args))
        # The worker reads the entries (and the regions they name) and writes
        # the statuses until the scatter has drained.
        keep = (src, group, dsts, table, anchor, st, sig)
        op = ScatterCompletion(core, ud, keep, st)
        cbs: List[CompletionCallback] = [functools.partial(_linger, group, keep)]
        if callback is not None:
            cbs.append(callback)
        op._cbs = cbs
        core.pending[ud] = op
        rc = _lib.xfer_scatter_submit(core.h, g_h, a_args, a_args + _SC.size)
        if rc:
            core.pending.pop(ud, None)
            if core.stopped:
                raise _shutdown(op_name)
            if rc == -_errno.EINVAL:
                raise _explain_scatter(group, src, ents, op_name)
            raise error_for(rc, op_name)
        return op

    def barrier(
        self,
        group: Group,
        imm: int,
        *,
        timeout_ms: int = 0,
        tag: int = 0,
        signal: Optional[SignalSpec] = None,
        callback: Optional[CompletionCallback] = None,
    ) -> Completion:
        """Delivers ``imm`` once to every member of ``group`` (``xfer_barrier``).

        When every member barriers on the same immediate over groups of the
        same size, each expects ``len(group)`` arrivals: ``expect_imm(imm,
        len(group))`` completes once all of them have reached the barrier.
        ``signal=`` as in :meth:`write`: stored once our immediates are out."""
        core = self._core
        op_name = "xfer_barrier"
        if _lib.xfer_barrier is None:
            raise NotSupported(_errno.EOPNOTSUPP, "this libxfer has no xfer_barrier", op_name)
        if not isinstance(group, Group) or group._core is not core:
            raise InvalidArgument(_errno.EINVAL, "group is not a Group of this engine", op_name)
        g_h = group._h
        if g_h is None:
            raise _shutdown(op_name) if core.stopped else InvalidArgument(_errno.EINVAL, "the group is closed", op_name)
        _check_imm(imm, op_name)
        ud, sk = _pack_completion(core, op_name, timeout_ms, tag, signal)
        op = Completion(core, ud, _lib.XFER_OP_BARRIER, (group, sk))
        core.track(op, callback)
        rc = _lib.xfer_barrier(core.h, g_h, imm, core.scratch.ac)
        if rc:
            raise core.submit_failed(ud, rc, op_name)
        return op

    def send(
        self,
        peer: Peer,
        data: Any,
        *,
        timeout_ms: int = 0,
        tag: int = 0,
        signal: Optional[SignalSpec] = None,
        callback: Optional[CompletionCallback] = None,
    ) -> Completion:
        """SEND ``data`` (bytes-like, at most ``msg_max`` bytes) to ``peer``'s
        receive queue (``signal=`` as in :meth:`write`)."""
        core = self._core
        if getattr(peer, "_core", None) is not core:
            raise InvalidArgument(_errno.EINVAL, "peer is not a Peer of this engine", "xfer_send")
        ptr, n, keep = buffer_ptr(data)
        ud, sk = _pack_completion(core, "xfer_send", timeout_ms, tag, signal)
        op = Completion(core, ud, 1, (keep, sk))
        core.track(op, callback)
        rc = _lib.xfer_send(core.h, peer.index, ptr, n, core.scratch.ac)
        if rc:
            raise core.submit_failed(ud, rc, "xfer_send")
        return op

    def expect_imm(
        self,
        imm: int,
        count: int = 1,
        *,
        timeout_ms: int = 0,
        signal: Optional[SignalSpec] = None,
        callback: Optional[CompletionCallback] = None,
    ) -> Completion:
        """Completes once ``imm`` has arrived ``count`` times (arrivals before
        this call count; those ``count`` are consumed). Fails with
        :class:`xfer.TimeoutError` at the deadline and :class:`xfer.Busy` if
        ``imm`` is already armed.

        ``signal=(target, value)`` (see :meth:`write`) is stored when the
        count is reached (or the deadline passes, or it is disarmed): e.g. to
        release a GPU kernel spinning on a :meth:`xfer.Signal.pinned` word
        once a layer's pages have all arrived. An expectation refused at once
        (``Busy``, ``NoSpace``) completes without the store."""
        core = self._core
        _check_imm(imm, "xfer_expect_imm")
        if not 0 < count <= 0xFFFFFFFF:
            raise InvalidArgument(_errno.EINVAL, f"count must be 1..2^32-1, not {count}", "xfer_expect_imm")
        ud, sk = _pack_completion(core, "xfer_expect_imm", timeout_ms, 0, signal)
        op = Completion(core, ud, 5, sk)
        core.track(op, callback)
        rc = _lib.xfer_expect_imm(core.h, imm, count, core.scratch.ac)
        if rc:
            raise core.submit_failed(ud, rc, "xfer_expect_imm")
        return op

    def imm_disarm(self, imm: int) -> int:
        """Drops the expectation on ``imm`` (it completes with :class:`xfer.Cancelled`)
        and returns how many arrivals were pending (they are forgotten)."""
        _check_imm(imm, "xfer_imm_disarm")
        if self._core.stopped:
            raise _shutdown("xfer_imm_disarm")
        arrived = c_uint32()
        check(_lib.xfer_imm_disarm(self._core.h, imm, byref(arrived)), "xfer_imm_disarm")
        return arrived.value

    def cancel(
        self,
        tag: int,
        *,
        timeout_ms: int = 0,
        signal: Optional[SignalSpec] = None,
        callback: Optional[CompletionCallback] = None,
    ) -> Completion:
        """Cancels every operation submitted with ``tag``; each still completes once
        (:class:`xfer.Cancelled` if cut short). The returned completion's result
        is how many were cut short, once nothing of them can land any more.
        ``signal=`` as in :meth:`write`."""
        core = self._core
        if _lib.xfer_cancel is None:
            raise NotSupported(_errno.EOPNOTSUPP, "this libxfer has no xfer_cancel", "cancel")
        if not tag:
            raise InvalidArgument(_errno.EINVAL, "tag 0 means no tag", "xfer_cancel")
        ud, sk = _pack_completion(core, "xfer_cancel", timeout_ms, 0, signal)
        op = Completion(core, ud, _lib.XFER_OP_CANCEL, sk)
        core.track(op, callback)
        rc = _lib.xfer_cancel(core.h, tag, core.scratch.ac)
        if rc:
            raise core.submit_failed(ud, rc, "xfer_cancel")
        return op

    # -- completions
    def progress(self, timeout: float = 0) -> int:
        """Reaps completions in this thread (waiting up to ``timeout`` s for the
        first); returns how many operations finished. Only needed with
        ``progress_thread=False``; harmless otherwise."""
        return self._core.progress(int(timeout * 1000) if timeout > 0 else 0)

    # -- receives
    def recv(self, timeout: Optional[float] = None) -> Message:
        """Takes one received message, waiting up to ``timeout`` s (None: forever).

        Raises :class:`xfer.TimeoutError` when none arrives in time, and
        :class:`xfer.InvalidArgument` on an engine made with ``on_recv``.
        """
        if self._on_recv is not None:
            raise InvalidArgument(_errno.EINVAL, "this engine delivers messages to on_recv", "xfer_recv")
        return _recv(self._core, self.msg_max, timeout)

    def try_recv(self) -> Optional[Message]:
        """A received message, or None if none is waiting (never blocks)."""
        try:
            return self.recv(0)
        except TimeoutError:
            return None

    def recv_into(self, buffer: Any, timeout: Optional[float] = None) -> Tuple[int, int]:
        """Receives into a writable buffer; returns (message length, sender engine id).

        A message longer than the buffer is truncated (the length says so)."""
        if memoryview(buffer).readonly:
            raise InvalidArgument(_errno.EINVAL, "recv_into needs a writable buffer", "xfer_recv")
        ptr, cap, keep = buffer_ptr(buffer)
        info = _lib.xfer_msg_info()
        _recv_raw(self._core, ptr, cap, info, timeout)
        return int(info.len), int(info.src_id)

    # -- statistics and tracing
    def stats(self) -> Stats:
        s = _lib.xfer_stats()
        _lib.xfer_engine_stats(self._core.h, byref(s))
        return Stats(*[int(getattr(s, f[0])) for f in _lib.xfer_stats._fields_])

    def trace(self, enable: bool = True) -> None:
        """Turns per-operation tracing on or off (benchmarks; see :meth:`read_traces`)."""
        _lib.xfer_engine_trace(self._core.h, 1 if enable else 0)

    def read_traces(self, max: int = 65536) -> List[Trace]:
        """Takes up to ``max`` trace records (oldest first)."""
        out: List[Trace] = []
        buf = (_lib.xfer_trace * 1024)()
        while len(out) < max:
            n = check(_lib.xfer_trace_read(self._core.h, buf, min(1024, max - len(out))), "xfer_trace_read")
            if n == 0:
                break
            for i in range(n):
                t = buf[i]
                out.append(Trace(t.user_data, t.kind, t.wrs, t.t_call, t.t_enq, t.t_deq, t.t_first, t.t_last, t.t_done, t.t_first_ret))
        return out


def _linger(group: "Group", keep: Any, c: Completion) -> None:
    """A scatter told early (its deadline) may still be drained by the worker:
    its arrays stay with the group until the group can be destroyed."""
    if c._res in (_E_TIMEDOUT, -_lib.XFER_EPEER):
        group._lingering.append(keep)


def _explain_scatter(group: "Group", src: Any, ents: List[Any], op: str) -> Error:
    """The likely reason for a bare -EINVAL from xfer_scatter."""
    for i, e in enumerate(ents):
        en = ScatterEntry(*e)
        member = en.member if isinstance(en.member, int) else group.index(en.member)
        if not 0 <= member < len(group.members):
            return InvalidArgument(_errno.EINVAL, f"entry {i}: member {member} is not in the group of {len(group.members)}", op)
        if en.nbytes and src is None:
            return InvalidArgument(_errno.EINVAL, f"entry {i}: {en.nbytes} bytes but no source region", op)
        if en.nbytes and src is not None and (en.src_offset + en.nbytes > src.nbytes):
            return InvalidArgument(_errno.EINVAL, f"entry {i}: source range past the end of the region", op)
        if en.dst_offset + en.nbytes > en.dst.nbytes:
            return InvalidArgument(_errno.EINVAL, f"entry {i}: destination range past the end of the region", op)
    if src is not None and getattr(src, "_revoked", False):
        return InvalidArgument(_errno.EINVAL, "the source region is revoked", op)
    if src is not None and src._core is not group._core:
        return InvalidArgument(_errno.EINVAL, "the source region belongs to another engine", op)
    return InvalidArgument(_errno.EINVAL, "invalid argument: an unknown flag or a bad range", op)


def _closed(core: _Core, op: str, src: Any, dst: Any) -> Error:
    """The error for a closed region: Shutdown if the engine is what closed it."""
    if core.stopped:
        return _shutdown(op)
    if src is not None and getattr(src, "_h", 0) is None:
        return InvalidArgument(_errno.EINVAL, "the source region is closed", op)
    return InvalidArgument(_errno.EINVAL, "the destination region is closed", op)


def _explain(rc: int, op: str, src: Any, dst: Any) -> Error:
    """A submission error, with the likely reason for a bare -EINVAL."""
    if rc == -_errno.EINVAL:
        if src is not None and getattr(src, "_h", 0) is None:
            return InvalidArgument(_errno.EINVAL, "the source region is closed", op)
        if getattr(dst, "_h", 0) is None:
            return InvalidArgument(_errno.EINVAL, "the destination region is closed", op)
        if src is not None and getattr(src, "_revoked", False):
            return InvalidArgument(_errno.EINVAL, "the source region is revoked", op)
        if src is not None and getattr(src, "_core", None) is not getattr(dst, "_core", None):
            return InvalidArgument(_errno.EINVAL, "source and destination belong to different engines", op)
        return InvalidArgument(
            _errno.EINVAL,
            "invalid argument: a range past the end of a region, a negative value, or an unknown flag",
            op,
        )
    return error_for(rc, op)


def _recv_raw(core: _Core, ptr: int, cap: int, info: Any, timeout: Optional[float]) -> None:
    deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
    while True:
        if deadline is None:
            ms = int(_WAIT_SLICE_S * 1000)
        else:
            left = deadline - time.monotonic()
            ms = max(0, int(min(left, _WAIT_SLICE_S) * 1000))
        if ms == 0:
            rc = _lib.xfer_recv(core.h, ptr, cap, byref(info))
            if rc == 0:
                rc = _E_TIMEDOUT
        else:
            rc = _lib.xfer_recv_wait(core.h, ptr, cap, byref(info), ms)
        if rc > 0:
            return
        if rc != _E_TIMEDOUT:
            raise error_for(rc, "xfer_recv")
        if core.closed:
            raise Shutdown(_errno.ESHUTDOWN, None, "xfer_recv")
        if deadline is not None and time.monotonic() >= deadline:
            raise TimeoutError(_errno.ETIMEDOUT, f"no message within {timeout} s", "xfer_recv")


def _recv(core: _Core, msg_max: int, timeout: Optional[float]) -> Message:
    buf = ctypes.create_string_buffer(max(1, msg_max))
    info = _lib.xfer_msg_info()
    _recv_raw(core, addressof(buf), msg_max, info, timeout)
    n = min(int(info.len), msg_max)
    ref = core.peers_by_id.get(info.src_id)
    return Message(_string_at(buf, n), int(info.src_id), ref() if ref is not None else None)


def _receiver_main(engine_ref: "weakref.ref[Engine]", core: _Core, fn: Callable[[Message], Any]) -> None:
    msg_max = engine_ref().msg_max if engine_ref() is not None else 65536  # type: ignore[union-attr]
    while not core.stopping:
        try:
            m = _recv(core, msg_max, _WAIT_SLICE_S)
        except TimeoutError:
            continue
        except Shutdown:
            break
        except Error as ex:
            if core.stopping:
                break
            log.error("xfer: receive failed: %s", ex)
            time.sleep(0.01)
            continue
        try:
            fn(m)
        except Exception:  # noqa: BLE001
            log.exception("xfer: exception in on_recv callback")
