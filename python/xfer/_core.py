"""The state an Engine shares with everything made from it (_Core): the
completion reaper, lifecycle (stop, close, deferred releases), the peer-down
signal, the per-thread submission scratch and its packers, and the
``struct xfer_attr`` and address plumbing that ``kv.py`` uses too."""
from __future__ import annotations

import ctypes
import errno as _errno
import itertools
import logging
import os
import struct
import threading
import time
import weakref
from ctypes import addressof
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from . import _lib
from ._completion import Completion, CompletionCallback, _run_callback
from ._errors import Error, PeerError, Shutdown, check, check_int, error_for, wrong_type
from ._signal import SignalSpec, signal_args

if TYPE_CHECKING:
    from ._engine import NicInfo
    from ._peer import Peer
    from ._region import Region, RemoteRegion

log = logging.getLogger("xfer")

_E_TIMEDOUT = -_errno.ETIMEDOUT
_REAP_BATCH = 256
_REAP_SLICE_MS = 20  # how long the reaper sleeps in C before it looks at its stop flag
_WAIT_SLICE_S = 0.2  # blocking waits wake this often (KeyboardInterrupt, close)
_DOWN_POLL_EVERY = 32  # busy reaper batches between two reads of the peer-down signal
_iter_cqes = struct.Struct("<QiI").iter_unpack
_string_at = ctypes.string_at

U32_MAX = (1 << 32) - 1
U64_MAX = (1 << 64) - 1

# ------------------------------------------------------------- the packers

SE = _lib.packer(_lib.xfer_scatter_entry)
SC = _lib.packer(_lib.xfer_scatter_t)
W = _lib.packer(_lib.xfer_write_t)
PW = _lib.packer(_lib.xfer_paged_write_t)
C = _lib.packer(_lib.xfer_completion)
# Every submission packs the whole struct xfer_completion: the per-thread
# buffer is reused, and a signal left over from an earlier operation would
# make the worker store into memory nobody keeps alive any more.
assert [f[0] for f in _lib.xfer_completion._fields_] == [
    "user_data", "cb", "cb_ctx", "timeout_ms", "tag", "signal", "signal_value"
]
OFF_PW = W.size
OFF_C = W.size + PW.size
_pack_c = C.pack_into


class _Scratch(threading.local):
    """Per-thread submission structs in one buffer, packed with struct.pack_into.

    The C side copies a submission before returning, so the buffer is reused.
    """

    def __init__(self) -> None:
        self.buf = bytearray(OFF_C + C.size)
        self._anchor = ctypes.c_char.from_buffer(self.buf)  # pins the buffer
        base = addressof(self._anchor)
        self.aw = base
        self.apw = base + OFF_PW
        self.ac = base + OFF_C


def pack_completion(core: "_Core", op: str, timeout_ms: int, tag: int, signal: Optional[SignalSpec]) -> Tuple[int, Any]:
    """Packs the struct xfer_completion of a call whose other arguments are
    plain values into this thread's scratch; returns the new user_data and
    what keeps the signal word alive."""
    sa = sv = 0
    sk = None
    if signal is not None:
        sa, sv, sk = signal_args(signal, op)
    ud = next(core.ids)
    try:
        _pack_c(core.scratch.buf, OFF_C, ud, 0, 0, timeout_ms, tag, sa, sv)
    except struct.error:
        raise_range(op, timeout_ms=(timeout_ms, U64_MAX), tag=(tag, U64_MAX))
    return ud, sk


def raise_range(op: str, **fields: Tuple[Any, int]) -> None:
    """After a struct.error while packing: raises the error naming the first
    field (name=(value, max)) that is no int in 0 .. max. Checked only on the
    failure path, so that a good submission pays nothing for it."""
    for name, (value, hi) in fields.items():
        check_int(value, name, 0, hi, op)
    raise error_for(-_errno.EINVAL, op, "a value does not fit its C field")  # pragma: no cover


# ------------------------------------------------------ struct xfer_attr

#: Integer fields of struct xfer_attr and the range of their C types.
ATTR_RANGES: Dict[str, Tuple[int, int]] = {
    "worker_cpu": (_lib.XFER_CPU_AUTO, (1 << 31) - 1),
    "submit_depth": (0, U32_MAX),
    "max_ops": (0, U32_MAX),
    "recv_count": (0, U32_MAX),
    "msg_max": (0, U32_MAX),
    "imm_slots": (0, U32_MAX),
    "max_regions": (0, U32_MAX),
    "spin_us": (0, U32_MAX),
    "busy_poll": (0, 2),
    "timeout_ms": (0, U64_MAX),
    "log_level": (-(1 << 31), (1 << 31) - 1),
    "heartbeat_ms": (0, U32_MAX),
    "heartbeat_misses": (0, U32_MAX),
}


def make_attr(op: str, provider: Optional[str] = None, nics: Union[str, Sequence[str], None] = None,
              **ints: Optional[int]) -> Tuple[_lib.xfer_attr, List[bytes]]:
    """A struct xfer_attr: the library defaults (and XFER_* environment), then
    every argument that is not None, each checked against its C type (ctypes
    would silently wrap an int that does not fit). Returns it with the
    strings it points to, which must live until the engine is created."""
    a = _lib.defaults()
    keep: List[bytes] = []
    if provider is not None:
        if not isinstance(provider, str):
            raise wrong_type("provider", "a str", provider, op)
        keep.append(provider.encode())
        a.provider = keep[-1]
    if nics is not None:
        if isinstance(nics, str):
            s = nics
        elif isinstance(nics, (list, tuple)) and all(isinstance(n, str) for n in nics):
            s = ",".join(nics)
        else:
            raise wrong_type("nics", "a str or a list of str", nics, op)
        keep.append(s.encode())
        a.nics = keep[-1]
    for name, v in ints.items():
        if v is None:
            continue
        if name == "worker_cpu" and v == "auto":
            v = _lib.XFER_CPU_AUTO
        lo, hi = ATTR_RANGES[name]
        setattr(a, name, check_int(v, name, lo, hi, op))
    return a, keep


def engine_address(h: int) -> bytes:
    """``xfer_engine_addr`` of the engine handle ``h``."""
    buf = ctypes.create_string_buffer(_lib.XFER_ADDR_MAX)
    n = check(_lib.xfer_engine_addr(h, buf, len(buf), None), "xfer_engine_addr")
    return buf.raw[:n]


# ------------------------------------------------------- peer-down signal


class PeerDownSignal:
    """A non-blocking pipe the C worker writes to when a peer dies.

    The engine's on_peer_down runs on its worker thread. A ctypes callback
    there would make the worker wait for the GIL (and, at interpreter exit,
    call into a finalizing interpreter), so the handler the library gets is
    its own ``xfer_peer_down_notify_fd`` — correctly typed, it only writes 8
    bytes to this pipe. Python threads read the pipe and ask
    ``xfer_peer_state`` which peers died.
    """

    def __init__(self) -> None:
        self._r, self._w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.callback = _lib.PEER_DOWN_NOTIFY_FD  # the C function pointer for on_peer_down
        self.ctx = self._w  # its ctx: the descriptor, as a pointer-sized int

    def take(self) -> bool:
        """True (and consumes what was written) if the worker wrote since the last take."""
        try:
            return bool(os.read(self._r, 4096))
        except (BlockingIOError, OSError):
            return False

    def close(self) -> None:
        # Only once the worker has exited (xfer_engine_stop): nobody writes any more.
        if self._w >= 0:
            os.close(self._r)
            os.close(self._w)
            self._r = self._w = -1


# ------------------------------------------------------------------- core


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
        self.down_signal: Optional[PeerDownSignal] = None
        self.down_polls = 0  # reaper batches since the signal was last read
        self.on_peer_down: Optional[Callable[..., Any]] = None
        self.poll_buf = (_lib.xfer_cqe * _REAP_BATCH)()
        self.zombies: List[Tuple[int, Any]] = []  # collected regions still busy in C
        self.zombie_groups: List[Tuple[int, Any]] = []  # collected groups still busy in C
        self.poll_lock = threading.Lock()
        self.nic_infos: List[NicInfo] = []
        self.strays = 0  # completions that matched no pending operation
        self.metrics_servers: List[Any] = []  # _metrics.MetricsServer, closed with the engine

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
            self.check_peers_down(done == 0)
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
        watch_down = self.down_signal is not None
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
            if watch_down:
                self.check_peers_down(n <= 0)

    def check_peers_down(self, idle: bool) -> None:
        """Reads the peer-down signal when idle, else every _DOWN_POLL_EVERY
        calls: reading it is a system call, and peer deaths are rare."""
        self.down_polls += 1
        if not idle and self.down_polls < _DOWN_POLL_EVERY:
            return
        self.down_polls = 0
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
            return shutdown(op)
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
            servers, self.metrics_servers = self.metrics_servers, []
        for server in servers:
            server.close()
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


def shutdown(op: str) -> Shutdown:
    return Shutdown(_errno.ESHUTDOWN, "the engine is stopped or closed", op)


def destroy(h: int, pid: int, keep: Any = None) -> None:
    """The C engine's finalizer (``keep``: what must outlive it, e.g. the peer-down pipe)."""
    if os.getpid() == pid:
        _lib.xfer_engine_destroy(h)
