"""Engine, peers, regions and completions over libxfer (ctypes)."""
from __future__ import annotations

import concurrent.futures
import ctypes
import errno as _errno
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
from ._errors import (
    Cancelled,
    Error,
    InvalidArgument,
    NotSupported,
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


_W = _lib.packer(_lib.xfer_write_t)
_PW = _lib.packer(_lib.xfer_paged_write_t)
_C = _lib.packer(_lib.xfer_completion)
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
        self.closed = False
        self.stopping = False
        self.mrs: Dict[int, "weakref.ref[Region]"] = {}
        self.rmrs: Dict[int, "weakref.ref[RemoteRegion]"] = {}
        self.orphan_rmrs: set = set()  # imported before close, freed when their objects go
        self.peers_by_id: Dict[int, "weakref.ref[Peer]"] = {}
        self.scratch = _Scratch()
        self.reaper: Optional[threading.Thread] = None
        self.receiver: Optional[threading.Thread] = None
        self.peer_down_events: List[Tuple[int, int, int]] = []
        self.on_peer_down: Optional[Callable[..., Any]] = None
        self.keep_c_callbacks: List[Any] = []
        self.poll_buf = (_lib.xfer_cqe * _REAP_BATCH)()
        self.zombies: List[Tuple[int, Any]] = []  # collected regions still busy in C
        self.poll_lock = threading.Lock()

    # -- completions
    def dispatch(self, raw: bytes) -> int:
        pop = self.pending.pop
        n = 0
        for ud, res, kind in _iter_cqes(raw):
            op = pop(ud, None)
            if op is None:
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
                return 0
            check(n, "xfer_cq_wait")
            raw = _string_at(addressof(buf), n * 16)
        done = self.dispatch(raw)
        self._peer_events()
        return done

    def reaper_main(self) -> None:
        buf = (_lib.xfer_cqe * _REAP_BATCH)()
        a = addressof(buf)
        h = self.h
        cq_wait = _lib.xfer_cq_wait
        ticks = 0
        while not self.stopping:
            ticks += 1
            if self.zombies and ticks % 25 == 0:
                self.retry_zombies()
            n = cq_wait(h, a, _REAP_BATCH, _REAP_SLICE_MS)
            if n > 0:
                self.dispatch(_string_at(a, n * 16))
            elif n != _E_TIMEDOUT:
                log.error("xfer: xfer_cq_wait failed: %s", _lib.strerror(n))
                time.sleep(0.01)
            if self.peer_down_events:
                self._peer_events()

    def _peer_events(self) -> None:
        while self.peer_down_events:
            idx, engine_id, reason = self.peer_down_events.pop(0)
            cb = self.on_peer_down
            if cb is None:
                continue
            ref = self.peers_by_id.get(engine_id)
            peer = ref() if ref is not None else None
            try:
                cb(peer if peer is not None else idx, error_for(reason, "peer down"))
            except Exception:  # noqa: BLE001
                log.exception("xfer: exception in on_peer_down callback")

    def wait_for(self, op: Completion, timeout: Optional[float]) -> bool:
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        if self.manual:
            if self.zombies:
                self.retry_zombies()
            while not op._done:
                left = _WAIT_SLICE_S if deadline is None else deadline - time.monotonic()
                if left <= 0 or self.closed:
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

    def submit_failed(self, ud: int, rc: int, op: str) -> Error:
        self.pending.pop(ud, None)
        return error_for(rc, op)

    # -- lifecycle
    def close(self) -> None:
        if os.getpid() != self.pid:  # a forked child owns no worker thread
            return
        with self.ctl:
            if self.closed:
                return
            self.closed = True
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
        self._peer_events()
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

    def retry_zombies(self) -> None:
        with self.ctl:
            left = []
            for h, keep in self.zombies:
                if self.dereg(h) == -_errno.EBUSY:
                    left.append((h, keep))
            self.zombies = left

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


def _destroy(h: int, pid: int) -> None:
    if os.getpid() == pid:
        _lib.xfer_engine_destroy(h)


# ------------------------------------------------------------ regions, peers


class Region:
    """Local memory registered with an engine (``Engine.register``).

    ``descriptor`` is the bytes a peer passes to ``import_region`` to write
    here. The region keeps its backing object alive; close it (or use it as a
    context manager) to deregister — :class:`xfer.Busy` while operations
    still read from it. A region that is garbage-collected deregisters itself.
    """

    __slots__ = ("_core", "_h", "_fin", "engine", "obj", "ptr", "nbytes", "device", "descriptor", "_keep", "__weakref__")

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
        # Deregisters a region dropped without close(). At interpreter exit the
        # engine's own finalizer releases everything instead.
        self._fin = weakref.finalize(self, _region_gone, self._core, h, mem.keep)
        self._fin.atexit = False

    @property
    def closed(self) -> bool:
        return self._h is None

    def close(self) -> None:
        """Deregisters (idempotent). Raises :class:`xfer.Busy` while operations use it."""
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
        """Withdraws remote access at once (descriptors handed out die); then close() it."""
        if _lib.xfer_mr_revoke is None:
            raise NotSupported(_errno.EOPNOTSUPP, "this libxfer has no xfer_mr_revoke", "revoke")
        if self._h is None:
            raise InvalidArgument(_errno.EINVAL, "region is closed", "xfer_mr_revoke")
        check(_lib.xfer_mr_revoke(self._h), "xfer_mr_revoke")

    def __enter__(self) -> "Region":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __len__(self) -> int:
        return self.nbytes

    def __repr__(self) -> str:
        state = "closed" if self._h is None else f"{self.nbytes} B at {self.ptr:#x} on {self.device}"
        return f"<xfer.Region {state}>"


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
        """``"live"``, ``"dead"`` (failed: submissions raise PeerError) or ``"removed"``."""
        if self._removed:
            return "removed"
        if _lib.xfer_peer_state is None:
            return "live"
        s = _lib.xfer_peer_state(self._core.h, self.index)
        return {_lib.XFER_PEER_LIVE: "live", _lib.XFER_PEER_DEAD: "dead"}.get(s, "removed")

    @property
    def shards(self) -> int:
        """How many times a sharded write (``flags=xfer.F_SHARD``) delivers its immediate."""
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
        check(_lib.xfer_peer_remove(self._core.h, self.index), "xfer_peer_remove")
        self._removed = True
        self._core.peers_by_id.pop(self.id, None)

    def __repr__(self) -> str:
        return f"<xfer.Peer {self.index} id={self.id:016x}>"


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
    comma-separated string or a list: ``"lo"``), ``worker_cpu``,
    ``submit_depth``, ``max_ops``, ``recv_count``, ``msg_max``, ``imm_slots``,
    ``max_regions``, ``spin_us``, ``timeout_ms`` (default deadline of operations),
    ``log_level``, ``heartbeat_ms``, ``heartbeat_misses``.

    Python-side options:

    * ``on_recv(message)``: receive by callback (on a dedicated thread)
      instead of :meth:`recv`.
    * ``on_peer_down(peer, error)``: called once per failed peer.
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
        worker_cpu: Optional[int] = None,
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
        given = locals()
        for name in _ATTR_INTS:
            v = given[name]
            if v is not None:
                if not isinstance(v, int) or isinstance(v, bool) or (v < 0 and name not in ("worker_cpu", "log_level")):
                    raise InvalidArgument(_errno.EINVAL, f"{name} must be a non-negative int, not {v!r}", "Engine")
                try:
                    setattr(a, name, v)
                except (TypeError, OverflowError) as ex:
                    raise InvalidArgument(_errno.EINVAL, f"{name}={v!r}: {ex}", "Engine") from None
        peer_down_cb = None
        if on_peer_down is not None:
            events: List[Tuple[int, int, int]] = []

            def _c_peer_down(ctx: Any, peer: int, engine_id: int, reason: int) -> None:
                events.append((peer, engine_id, reason))  # worker thread: record only

            peer_down_cb = _lib.xfer_peer_down_fn(_c_peer_down)
            a.on_peer_down = ctypes.cast(peer_down_cb, c_void_p)
        out = c_void_p()
        check(_lib.xfer_engine_create(byref(a), byref(out)), "xfer_engine_create")
        assert out.value is not None
        core = self._core = _Core(out.value, not progress_thread)
        self._destroyer = weakref.finalize(core, _destroy, core.h, core.pid)
        if peer_down_cb is not None:
            core.keep_c_callbacks.append(peer_down_cb)
            core.peer_down_events = events
            core.on_peer_down = on_peer_down
        self.msg_max = int(a.msg_max)
        self.timeout_ms = int(a.timeout_ms)
        self.id = int(_lib.xfer_engine_id(core.h))
        self.provider = (_lib.xfer_engine_provider(core.h) or b"").decode()
        self.nics = [
            (_lib.xfer_engine_nic_name(core.h, i) or b"").decode()
            for i in range(_lib.xfer_engine_nic_count(core.h))
        ]
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

    def __repr__(self) -> str:
        state = " closed" if self._core.closed else ""
        return f"<xfer.Engine {self.id:016x} {self.provider} on {','.join(self.nics)}{state}>"

    # -- lifecycle
    def close(self) -> None:
        """Stops the worker: in-flight operations complete with :class:`xfer.Cancelled`
        (after up to 2 s to drain), every region and imported region is released,
        later calls raise :class:`xfer.Shutdown`. Idempotent."""
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
        idx = c_uint32()
        check(_lib.xfer_peer_add(core.h, a, len(a), byref(idx)), "xfer_peer_add")
        p = Peer(self, idx.value)
        core.peers_by_id[p.id] = weakref.ref(p)
        return p

    def import_region(self, peer: Peer, descriptor: BytesLike) -> RemoteRegion:
        """Parses a region descriptor (untrusted bytes) that must belong to ``peer``."""
        core = self._core
        if not isinstance(peer, Peer) or peer._core is not core:
            raise InvalidArgument(_errno.EINVAL, "peer is not a Peer of this engine", "xfer_rmr_import")
        d = bytes(descriptor)
        out = c_void_p()
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
        if not mem.device.is_host:
            # The one place a device kind reaches the C library. It needs an
            # entry point that takes the memory kind (see docs/python.md).
            raise NotSupported(
                _errno.EOPNOTSUPP,
                f"cannot register {mem.device} memory: this libxfer registers host memory only "
                "(no CUDA/device registration in the C API yet); copy to a host buffer, "
                "e.g. tensor.cpu() or pinned memory",
                "register",
            )
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
        callback: Optional[CompletionCallback] = None,
    ) -> Completion:
        """One-sided WRITE of ``nbytes`` (default: the rest of ``src``) into ``dst``.

        With ``imm`` the write delivers that 32-bit immediate once it has
        landed. ``src=None`` with ``nbytes`` 0 is an immediate-only write
        into ``dst``. ``timeout_ms`` (0: engine default) is the operation's
        deadline; ``tag`` groups operations for :meth:`cancel`.
        """
        core = self._core
        try:
            s_h = src._h if src is not None else None
            d_h = dst._h
        except AttributeError:
            raise InvalidArgument(_errno.EINVAL, "write(src: Region | None, dst: RemoteRegion, ...)", "xfer_write") from None
        if nbytes is None:
            nbytes = src.nbytes - src_offset if src is not None else 0
        if imm is not None:
            if not 0 <= imm <= 0xFFFFFFFF:
                raise InvalidArgument(_errno.EINVAL, f"imm {imm} is not a 32-bit unsigned value", "xfer_write")
            flags |= 1
        ud = next(core.ids)
        sc = core.scratch
        buf = sc.buf
        try:
            _pack_w(buf, 0, s_h or 0, src_offset, d_h or 0, dst_offset, nbytes, imm or 0, flags)
            _pack_c(buf, _OFF_C, ud, 0, 0, timeout_ms, tag)
        except struct.error as ex:
            raise _bad_values("xfer_write", ex) from None
        op = Completion(core, ud, 2, (src, dst))
        if callback is not None:
            op._cbs = [callback]
        core.pending[ud] = op
        rc = _lib.xfer_write(core.h, sc.aw, sc.ac)
        if rc:
            core.pending.pop(ud, None)
            raise _explain(rc, "xfer_write", src, dst)
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
        callback: Optional[CompletionCallback] = None,
    ) -> Completion:
        """Paged WRITE: page i goes from ``src_base + src_pages[i]*src_stride``
        to ``dst_base + dst_pages[i]*dst_stride``, ``page_len`` bytes each.

        Index arrays are numpy/torch int32 or uint32 arrays (passed by
        pointer, kept alive until completion) or sequences of ints. Strides
        default to ``page_len``. With ``imm`` every page delivers it once, so
        the receiver expects ``len(src_pages)`` arrivals.
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
        if imm is not None:
            if not 0 <= imm <= 0xFFFFFFFF:
                raise InvalidArgument(_errno.EINVAL, f"imm {imm} is not a 32-bit unsigned value", "xfer_write_paged")
            flags |= 1
        ud = next(core.ids)
        sc = core.scratch
        buf = sc.buf
        try:
            _pack_pw(
                buf, _OFF_PW, s_h or 0, d_h or 0, page_len,
                sp, page_len if src_stride is None else src_stride, src_base,
                dp, page_len if dst_stride is None else dst_stride, dst_base,
                n, imm or 0, flags,
            )
            _pack_c(buf, _OFF_C, ud, 0, 0, timeout_ms, tag)
        except struct.error as ex:
            raise _bad_values("xfer_write_paged", ex) from None
        op = Completion(core, ud, 3, (src, dst, sk, dk))
        if callback is not None:
            op._cbs = [callback]
        core.pending[ud] = op
        rc = _lib.xfer_write_paged(core.h, sc.apw, sc.ac)
        if rc:
            core.pending.pop(ud, None)
            raise _explain(rc, "xfer_write_paged", src, dst)
        return op

    def write_imm(
        self,
        peer: Peer,
        imm: int,
        *,
        timeout_ms: int = 0,
        tag: int = 0,
        callback: Optional[CompletionCallback] = None,
    ) -> Completion:
        """Delivers the 32-bit immediate ``imm`` once to ``peer``, with no data."""
        core = self._core
        if getattr(peer, "_core", None) is not core:
            raise InvalidArgument(_errno.EINVAL, "peer is not a Peer of this engine", "xfer_write_imm")
        if not 0 <= imm <= 0xFFFFFFFF:
            raise InvalidArgument(_errno.EINVAL, f"imm {imm} is not a 32-bit unsigned value", "xfer_write_imm")
        ud = next(core.ids)
        sc = core.scratch
        try:
            _pack_c(sc.buf, _OFF_C, ud, 0, 0, timeout_ms, tag)
        except struct.error as ex:
            raise _bad_values("xfer_write_imm", ex) from None
        op = Completion(core, ud, 4)
        if callback is not None:
            op._cbs = [callback]
        core.pending[ud] = op
        rc = _lib.xfer_write_imm(core.h, peer.index, imm, sc.ac)
        if rc:
            raise core.submit_failed(ud, rc, "xfer_write_imm")
        return op

    def send(
        self,
        peer: Peer,
        data: Any,
        *,
        timeout_ms: int = 0,
        tag: int = 0,
        callback: Optional[CompletionCallback] = None,
    ) -> Completion:
        """SEND ``data`` (bytes-like, at most ``msg_max`` bytes) to ``peer``'s receive queue."""
        core = self._core
        if getattr(peer, "_core", None) is not core:
            raise InvalidArgument(_errno.EINVAL, "peer is not a Peer of this engine", "xfer_send")
        ptr, n, keep = buffer_ptr(data)
        ud = next(core.ids)
        sc = core.scratch
        try:
            _pack_c(sc.buf, _OFF_C, ud, 0, 0, timeout_ms, tag)
        except struct.error as ex:
            raise _bad_values("xfer_send", ex) from None
        op = Completion(core, ud, 1, keep)
        if callback is not None:
            op._cbs = [callback]
        core.pending[ud] = op
        rc = _lib.xfer_send(core.h, peer.index, ptr, n, sc.ac)
        if rc:
            raise core.submit_failed(ud, rc, "xfer_send")
        return op

    def expect_imm(
        self,
        imm: int,
        count: int = 1,
        *,
        timeout_ms: int = 0,
        callback: Optional[CompletionCallback] = None,
    ) -> Completion:
        """Completes once ``imm`` has arrived ``count`` times (arrivals before
        this call count; those ``count`` are consumed). Fails with
        :class:`xfer.TimeoutError` at the deadline and :class:`xfer.Busy` if
        ``imm`` is already armed."""
        core = self._core
        if not 0 <= imm <= 0xFFFFFFFF:
            raise InvalidArgument(_errno.EINVAL, f"imm {imm} is not a 32-bit unsigned value", "xfer_expect_imm")
        if not 0 < count <= 0xFFFFFFFF:
            raise InvalidArgument(_errno.EINVAL, f"count must be 1..2^32-1, not {count}", "xfer_expect_imm")
        ud = next(core.ids)
        sc = core.scratch
        try:
            _pack_c(sc.buf, _OFF_C, ud, 0, 0, timeout_ms, 0)
        except struct.error as ex:
            raise _bad_values("xfer_expect_imm", ex) from None
        op = Completion(core, ud, 5)
        if callback is not None:
            op._cbs = [callback]
        core.pending[ud] = op
        rc = _lib.xfer_expect_imm(core.h, imm, count, sc.ac)
        if rc:
            raise core.submit_failed(ud, rc, "xfer_expect_imm")
        return op

    def imm_disarm(self, imm: int) -> int:
        """Drops the expectation on ``imm`` (it completes with :class:`xfer.Cancelled`)
        and returns how many arrivals were pending (they are forgotten)."""
        if not 0 <= imm <= 0xFFFFFFFF:
            raise InvalidArgument(_errno.EINVAL, f"imm {imm} is not a 32-bit unsigned value", "xfer_imm_disarm")
        arrived = c_uint32()
        check(_lib.xfer_imm_disarm(self._core.h, imm, byref(arrived)), "xfer_imm_disarm")
        return arrived.value

    def cancel(self, tag: int, *, timeout_ms: int = 0, callback: Optional[CompletionCallback] = None) -> Completion:
        """Cancels every operation submitted with ``tag``; each still completes once
        (:class:`xfer.Cancelled` if cut short). The returned completion's result
        is how many were cut short, once nothing of them can land any more."""
        core = self._core
        if _lib.xfer_cancel is None:
            raise NotSupported(_errno.EOPNOTSUPP, "this libxfer has no xfer_cancel", "cancel")
        if not tag:
            raise InvalidArgument(_errno.EINVAL, "tag 0 means no tag", "xfer_cancel")
        ud = next(core.ids)
        sc = core.scratch
        try:
            _pack_c(sc.buf, _OFF_C, ud, 0, 0, timeout_ms, 0)
        except struct.error as ex:
            raise _bad_values("xfer_cancel", ex) from None
        op = Completion(core, ud, _lib.XFER_OP_CANCEL)
        if callback is not None:
            op._cbs = [callback]
        core.pending[ud] = op
        rc = _lib.xfer_cancel(core.h, tag, sc.ac)
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
                out.append(Trace(t.user_data, t.kind, t.wrs, t.t_call, t.t_enq, t.t_deq, t.t_first, t.t_last, t.t_done))
        return out


def _explain(rc: int, op: str, src: Any, dst: Any) -> Error:
    """A submission error, with the likely reason for a bare -EINVAL."""
    if rc == -_errno.EINVAL:
        if src is not None and getattr(src, "_h", 0) is None:
            return InvalidArgument(_errno.EINVAL, "the source region is closed", op)
        if getattr(dst, "_h", 0) is None:
            return InvalidArgument(_errno.EINVAL, "the destination region is closed", op)
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
