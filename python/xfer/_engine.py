"""The Engine: attributes, lifecycle, peers, memory, and every submission
through one tail (Engine._submit). The pieces it is built from live beside
it: _core (reaper, lifecycle, packers), _completion, _region, _peer, _recv."""
from __future__ import annotations

import ctypes
import errno as _errno
import functools
import struct
import threading
import weakref
from ctypes import addressof, byref, c_uint32, c_void_p
from typing import Any, Callable, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple, Union

from . import _lib, _metrics
from ._buffers import DeviceLike, Memory, buffer_ptr, index_array, resolve
from ._completion import Completion, CompletionCallback, ScatterCompletion
from ._core import (
    _E_TIMEDOUT,
    OFF_C,
    OFF_PW,
    SC,
    SE,
    U32_MAX,
    U64_MAX,
    C,
    PeerDownSignal,
    PW,
    W,
    _Core,
    destroy,
    engine_address,
    make_attr,
    pack_completion,
    raise_range,
    shutdown,
)
from ._errors import Error, InvalidArgument, check, check_int, error_for, out_of_range, wrong_type
from ._peer import Group, Peer, ScatterEntry
from ._recv import Message, receiver_main, recv, recv_raw
from ._region import Region, RemoteRegion, check_device
from ._signal import SignalSpec, signal_args

BytesLike = Union[bytes, bytearray, memoryview]

_EINVAL = -_errno.EINVAL
_F_IMM = _lib.XFER_F_IMM
_OP_SEND, _OP_WRITE, _OP_PAGED, _OP_IMM, _OP_EXPECT = (
    _lib.XFER_OP_SEND, _lib.XFER_OP_WRITE, _lib.XFER_OP_PAGED, _lib.XFER_OP_IMM, _lib.XFER_OP_EXPECT)
_pack_w = W.pack_into
_pack_pw = PW.pack_into
_pack_c = C.pack_into
_pack_se = SE.pack_into
# The submissions, looked up once (they keep the GIL: never block).
_xfer_write = _lib.xfer_write
_xfer_write_paged = _lib.xfer_write_paged
_xfer_write_imm = _lib.xfer_write_imm
_xfer_send = _lib.xfer_send
_xfer_expect_imm = _lib.xfer_expect_imm
_xfer_cancel = _lib.xfer_cancel
_xfer_scatter = _lib.xfer_scatter_submit
_xfer_barrier = _lib.xfer_barrier


def _submit(core: _Core, op: Any, callback: Optional[CompletionCallback]) -> Any:
    """The first half of the tail every submission shares: registers ``op``
    (and its callback) before the C call, since the worker may deliver the
    completion before the call returns. The C call itself stays in the
    caller: passing it through here as fn(*args) measured 10% slower per
    submit (python/bench, docs/python.md)."""
    if callback is not None:
        if op._cbs is None:
            op._cbs = [callback]
        else:
            op._cbs.append(callback)
    core.pending[op.user_data] = op
    return op


def _refused(core: _Core, op: Any, rc: int, name: str, why: Optional[Callable[[str, Any], Error]]) -> Error:
    """The second half, when the library refused the submission (it will
    never complete): forgets ``op`` and returns the error to raise —
    :class:`xfer.Shutdown` on a stopped engine, whatever the library checked
    first; ``why(name, op's keepalive)`` explains a bare -EINVAL when given."""
    core.pending.pop(op.user_data, None)
    if core.stopped:
        return shutdown(name)
    if rc == _EINVAL and why is not None:
        return why(name, op._keep)
    return error_for(rc, name)

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
    msgs_refused: int  #: messages whose sender was not the peer they named


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


class Engine:
    """One xfer engine: a worker thread owning one or more NICs.

    Keyword arguments mirror ``struct xfer_attr`` (None keeps the library
    default, after the ``XFER_*`` environment variables): ``provider``
    ("auto", "tcp", "shm", "verbs", "efa" or a full name), ``nics`` (a
    comma-separated string or a list: ``"lo"``), ``worker_cpu`` (a CPU,
    -1 unpinned, or ``"auto"``/``xfer.CPU_AUTO``: near the first NIC),
    ``submit_depth``, ``max_ops``, ``recv_count``, ``msg_max``, ``imm_slots``,
    ``max_regions``, ``spin_us``, ``busy_poll`` (1: the worker and the waits
    spin instead of sleeping; 2: also the waiting thread runs the worker's turns,
    docs/config.md), ``timeout_ms`` (default deadline of operations),
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
        busy_poll: Optional[int] = None,
        timeout_ms: Optional[int] = None,
        log_level: Optional[int] = None,
        heartbeat_ms: Optional[int] = None,
        heartbeat_misses: Optional[int] = None,
        on_recv: Optional[Callable[[Message], Any]] = None,
        on_peer_down: Optional[Callable[..., Any]] = None,
        progress_thread: bool = True,
    ):
        a, self._strings = make_attr(
            "Engine", provider, nics, worker_cpu=worker_cpu, submit_depth=submit_depth,  # type: ignore[arg-type]
            max_ops=max_ops, recv_count=recv_count, msg_max=msg_max, imm_slots=imm_slots,
            max_regions=max_regions, spin_us=spin_us, busy_poll=busy_poll, timeout_ms=timeout_ms,
            log_level=log_level,
            heartbeat_ms=heartbeat_ms, heartbeat_misses=heartbeat_misses,
        )
        if on_recv is not None and not callable(on_recv):
            raise wrong_type("on_recv", "callable", on_recv, "Engine")
        down_signal = None
        if on_peer_down is not None:
            if not callable(on_peer_down):
                raise wrong_type("on_peer_down", "callable", on_peer_down, "Engine")
            # The worker thread only writes to a pipe (see _core.PeerDownSignal):
            # it never waits for the GIL. The reaper thread (or progress())
            # calls on_peer_down.
            down_signal = PeerDownSignal()
            a.on_peer_down = down_signal.callback
            a.on_peer_down_ctx = down_signal.ctx
        out = c_void_p()
        rc = _lib.xfer_engine_create(byref(a), byref(out))
        if rc < 0 and down_signal is not None:
            down_signal.close()
        check(rc, "xfer_engine_create")
        assert out.value is not None
        core = self._core = _Core(out.value, not progress_thread)
        # The pipe goes with the C engine (its last user), not before.
        self._destroyer = weakref.finalize(core, destroy, core.h, core.pid, down_signal)
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
        self.address = engine_address(core.h)
        self._on_recv = on_recv
        if progress_thread:
            core.reaper = threading.Thread(target=core.reaper_main, name=f"xfer-reaper-{self.id:x}", daemon=True)
            core.reaper.start()
        if on_recv is not None:
            core.receiver = threading.Thread(
                target=receiver_main, args=(weakref.ref(self), core, on_recv), name=f"xfer-recv-{self.id:x}", daemon=True
            )
            core.receiver.start()
        self._closer = weakref.finalize(self, core.close)

    # -- identity
    def _read_nic_info(self, i: int) -> NicInfo:
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
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(infos):
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
        if not isinstance(address, (bytes, bytearray, memoryview)):
            raise wrong_type("address", "bytes", address, "xfer_peer_add")
        a = bytes(address)
        if core.stopped:
            raise shutdown("xfer_peer_add")
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
        members = list(peers)
        for p in members:
            if not isinstance(p, Peer):
                raise wrong_type("a group member", "a Peer", p, "xfer_group_create")
            if p._core is not core:
                raise InvalidArgument(_errno.EINVAL, f"{p!r} is not a Peer of this engine", "xfer_group_create")
        if not members:
            raise InvalidArgument(_errno.EINVAL, "a group needs at least one peer", "xfer_group_create")
        if core.stopped:
            raise shutdown("xfer_group_create")
        idx = (c_uint32 * len(members))(*[p.index for p in members])
        out = c_void_p()
        with core.ctl:
            check(_lib.xfer_group_create(core.h, idx, len(members), byref(out)), "xfer_group_create")
        return Group(self, int(out.value or 0), members)

    def import_region(self, peer: Peer, descriptor: BytesLike) -> RemoteRegion:
        """Parses a region descriptor (untrusted bytes) that must belong to ``peer``."""
        core = self._core
        _own_peer(core, peer, "xfer_rmr_import")
        if not isinstance(descriptor, (bytes, bytearray, memoryview)):
            raise wrong_type("descriptor", "bytes", descriptor, "xfer_rmr_import")
        d = bytes(descriptor)
        out = c_void_p()
        if core.stopped:
            raise shutdown("xfer_rmr_import")
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
            check_int(obj, "ptr", 1, U64_MAX, "register")
            obj = (obj, check_int(nbytes, "nbytes", 1, U64_MAX, "register"))
        elif nbytes is not None:
            raise InvalidArgument(_errno.EINVAL, "nbytes is only for raw addresses; slice the object instead", "register")
        mem = resolve(obj, device)
        return self._register_memory(mem, obj)

    def register_ptr(self, ptr: int, nbytes: int, device: DeviceLike = "cpu") -> Region:
        """Registers raw memory ``[ptr, ptr + nbytes)``; the caller keeps it alive."""
        check_int(ptr, "ptr", 1, U64_MAX, "register_ptr")
        check_int(nbytes, "nbytes", 1, U64_MAX, "register_ptr")
        return self._register_memory(resolve((ptr, nbytes), device), None)

    def _register_memory(self, mem: Memory, obj: Any) -> Region:
        core = self._core
        check_device(mem, "register")
        if core.stopped:
            raise shutdown("xfer_mr_reg")
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
        if type(dst) is not RemoteRegion or (src is not None and type(src) is not Region):
            raise _region_types("xfer_write", src, dst, None)
        s_h = src._h if src is not None else 0
        d_h = dst._h
        if s_h is None or d_h is None:  # a closed region: never let it pass as "no source"
            raise _closed(core, "xfer_write", src, dst)
        sa = sv = 0
        sk = None
        if signal is not None:
            sa, sv, sk = signal_args(signal, "xfer_write")
        if imm is not None and (type(imm) is not int or not 0 <= imm <= 0xFFFFFFFF):
            raise out_of_range("imm", imm, 0, U32_MAX, "xfer_write")
        ud = next(core.ids)
        sc = core.scratch
        buf = sc.buf
        try:
            if nbytes is None:
                nbytes = src.nbytes - src_offset if src is not None else 0
            _pack_w(buf, 0, s_h, src_offset, d_h, dst_offset, nbytes, imm or 0, flags | _F_IMM if imm is not None else flags)
            _pack_c(buf, OFF_C, ud, 0, 0, timeout_ms, tag, sa, sv)
        except (struct.error, TypeError):
            raise_range("xfer_write", nbytes=(nbytes, U64_MAX), src_offset=(src_offset, U64_MAX),
                        dst_offset=(dst_offset, U64_MAX), flags=(flags, U32_MAX),
                        timeout_ms=(timeout_ms, U64_MAX), tag=(tag, U64_MAX))
        op = _submit(core, Completion(core, ud, _OP_WRITE, (src, dst, sk)), callback)
        rc = _xfer_write(core.h, sc.aw, sc.ac)
        if rc:
            raise _refused(core, op, rc, "xfer_write", _why_write)
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
        if type(src) is not Region or type(dst) is not RemoteRegion:
            raise _region_types("xfer_write_paged", src, dst, "a Region")
        s_h = src._h
        d_h = dst._h
        if s_h is None or d_h is None:
            raise _closed(core, "xfer_write_paged", src, dst)
        sp, n, sk = index_array(src_pages)
        dp, m, dk = index_array(dst_pages)
        if n != m:
            raise InvalidArgument(_errno.EINVAL, f"{n} source pages but {m} destination pages", "xfer_write_paged")
        if n > U32_MAX:
            raise InvalidArgument(_errno.EINVAL, "more than 2^32-1 pages", "xfer_write_paged")
        sa = sv = 0
        sig = None
        if signal is not None:
            sa, sv, sig = signal_args(signal, "xfer_write_paged")
        if imm is not None and (type(imm) is not int or not 0 <= imm <= 0xFFFFFFFF):
            raise out_of_range("imm", imm, 0, U32_MAX, "xfer_write_paged")
        ud = next(core.ids)
        sc = core.scratch
        buf = sc.buf
        try:
            _pack_pw(
                buf, OFF_PW, s_h, d_h, page_len,
                sp, page_len if src_stride is None else src_stride, src_base,
                dp, page_len if dst_stride is None else dst_stride, dst_base,
                n, imm or 0, flags | _F_IMM if imm is not None else flags,
            )
            _pack_c(buf, OFF_C, ud, 0, 0, timeout_ms, tag, sa, sv)
        except (struct.error, TypeError):
            raise_range("xfer_write_paged", page_len=(page_len, U64_MAX),
                        src_stride=(page_len if src_stride is None else src_stride, U64_MAX),
                        dst_stride=(page_len if dst_stride is None else dst_stride, U64_MAX),
                        src_base=(src_base, U64_MAX), dst_base=(dst_base, U64_MAX), flags=(flags, U32_MAX),
                        timeout_ms=(timeout_ms, U64_MAX), tag=(tag, U64_MAX))
        op = _submit(core, Completion(core, ud, _OP_PAGED, (src, dst, sk, dk, sig)), callback)
        rc = _xfer_write_paged(core.h, sc.apw, sc.ac)
        if rc:
            raise _refused(core, op, rc, "xfer_write_paged", _why_write)
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
        if type(peer) is not Peer or peer._core is not core:
            raise _not_our_peer(core, peer, "xfer_write_imm")
        if type(imm) is not int or not 0 <= imm <= 0xFFFFFFFF:
            raise out_of_range("imm", imm, 0, U32_MAX, "xfer_write_imm")
        ud, sk = pack_completion(core, "xfer_write_imm", timeout_ms, tag, signal)
        op = _submit(core, Completion(core, ud, _OP_IMM, sk), callback)
        rc = _xfer_write_imm(core.h, peer.index, imm, core.scratch.ac)
        if rc:
            raise _refused(core, op, rc, "xfer_write_imm", None)
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
        _own_group(core, group, op_name)
        if src is not None and type(src) is not Region:
            raise wrong_type("src", "a Region or None", src, op_name)
        g_h = group._h
        s_h = 0 if src is None else src._h
        if g_h is None or s_h is None:
            if core.stopped:
                raise shutdown(op_name)
            raise InvalidArgument(_errno.EINVAL, "the group is closed" if g_h is None else "the source region is closed", op_name)
        ents = list(entries)
        n = len(ents)
        if n == 0 or n > U32_MAX:
            raise InvalidArgument(_errno.EINVAL, "a scatter needs 1 .. 2^32-1 entries", op_name)
        table = bytearray(n * SE.size)
        dsts: List[RemoteRegion] = []
        for i, e in enumerate(ents):
            try:
                member, dst, nbytes, src_off, dst_off = ScatterEntry(*e)
            except TypeError:
                raise InvalidArgument(
                    _errno.EINVAL, f"entry {i}: give (member, dst, nbytes[, src_offset[, dst_offset]])", op_name
                ) from None
            if isinstance(member, Peer):
                member = group.index(member)
            if type(dst) is not RemoteRegion:
                raise wrong_type(f"entry {i}: dst", "a RemoteRegion", dst, op_name)
            if dst._h is None:
                if core.stopped:
                    raise shutdown(op_name)
                raise InvalidArgument(_errno.EINVAL, f"entry {i}: the destination region is closed", op_name)
            try:
                _pack_se(table, i * SE.size, member, src_off, nbytes, dst._h, dst_off)
            except (struct.error, TypeError):
                raise_range(op_name, **{f"entry {i}: member": (member, U32_MAX), f"entry {i}: src_offset": (src_off, U64_MAX),
                                        f"entry {i}: nbytes": (nbytes, U64_MAX), f"entry {i}: dst_offset": (dst_off, U64_MAX)})
            dsts.append(dst)
        if imm is not None:
            check_int(imm, "imm", 0, U32_MAX, op_name)
        sa = sv = 0
        sig = None
        if signal is not None:
            sa, sv, sig = signal_args(signal, op_name)
        anchor = ctypes.c_char.from_buffer(table)
        st = (ctypes.c_int32 * n)() if status else None
        ud = next(core.ids)
        # The scatter and completion structs are copied by the call.
        args = bytearray(SC.size + C.size)
        try:
            SC.pack_into(args, 0, s_h, addressof(anchor), n, imm or 0, flags | _F_IMM if imm is not None else flags,
                         addressof(st) if st is not None else 0)
            _pack_c(args, SC.size, ud, 0, 0, timeout_ms, tag, sa, sv)
        except (struct.error, TypeError):
            raise_range(op_name, flags=(flags, U32_MAX), timeout_ms=(timeout_ms, U64_MAX), tag=(tag, U64_MAX))
        a_args = addressof(ctypes.c_char.from_buffer(args))
        # The worker reads the entries (and the regions they name) and writes
        # the statuses until the scatter has drained.
        keep = (src, group, dsts, table, anchor, st, sig, ents)
        op = ScatterCompletion(core, ud, keep, st)
        op._cbs = [functools.partial(_linger, group, keep)]
        op = _submit(core, op, callback)
        rc = _xfer_scatter(core.h, g_h, a_args, a_args + SC.size)
        if rc:
            raise _refused(core, op, rc, op_name, _why_scatter)
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
        _own_group(core, group, op_name)
        g_h = group._h
        if g_h is None:
            raise shutdown(op_name) if core.stopped else InvalidArgument(_errno.EINVAL, "the group is closed", op_name)
        check_int(imm, "imm", 0, U32_MAX, op_name)
        ud, sk = pack_completion(core, op_name, timeout_ms, tag, signal)
        op = _submit(core, Completion(core, ud, _lib.XFER_OP_BARRIER, (group, sk)), callback)
        rc = _xfer_barrier(core.h, g_h, imm, core.scratch.ac)
        if rc:
            raise _refused(core, op, rc, op_name, None)
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
        if type(peer) is not Peer or peer._core is not core:
            raise _not_our_peer(core, peer, "xfer_send")
        ptr, n, keep = buffer_ptr(data)
        ud, sk = pack_completion(core, "xfer_send", timeout_ms, tag, signal)
        op = _submit(core, Completion(core, ud, _OP_SEND, (keep, sk)), callback)
        rc = _xfer_send(core.h, peer.index, ptr, n, core.scratch.ac)
        if rc:
            raise _refused(core, op, rc, "xfer_send", None)
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
        if type(imm) is not int or not 0 <= imm <= 0xFFFFFFFF:
            raise out_of_range("imm", imm, 0, U32_MAX, "xfer_expect_imm")
        if type(count) is not int or not 0 < count <= 0xFFFFFFFF:
            raise out_of_range("count", count, 1, U32_MAX, "xfer_expect_imm")
        ud, sk = pack_completion(core, "xfer_expect_imm", timeout_ms, 0, signal)
        op = _submit(core, Completion(core, ud, _OP_EXPECT, sk), callback)
        rc = _xfer_expect_imm(core.h, imm, count, core.scratch.ac)
        if rc:
            raise _refused(core, op, rc, "xfer_expect_imm", None)
        return op

    def imm_disarm(self, imm: int) -> int:
        """Drops the expectation on ``imm`` (it completes with :class:`xfer.Cancelled`)
        and returns how many arrivals were pending (they are forgotten)."""
        check_int(imm, "imm", 0, U32_MAX, "xfer_imm_disarm")
        if self._core.stopped:
            raise shutdown("xfer_imm_disarm")
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
        if tag == 0 and isinstance(tag, int):
            raise InvalidArgument(_errno.EINVAL, "tag 0 means no tag", "xfer_cancel")
        check_int(tag, "tag", 1, U64_MAX, "xfer_cancel")
        ud, sk = pack_completion(core, "xfer_cancel", timeout_ms, 0, signal)
        op = _submit(core, Completion(core, ud, _lib.XFER_OP_CANCEL, sk), callback)
        rc = _xfer_cancel(core.h, tag, core.scratch.ac)
        if rc:
            raise _refused(core, op, rc, "xfer_cancel", None)
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
        return recv(self._core, self.msg_max, timeout)

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
        recv_raw(self._core, ptr, cap, info, timeout)
        return int(info.len), int(info.src_id)

    # -- statistics and tracing
    def stats(self) -> Stats:
        s = _lib.xfer_stats()
        _lib.xfer_engine_stats(self._core.h, byref(s))
        return Stats(*[int(getattr(s, f[0])) for f in _lib.xfer_stats._fields_])

    def telemetry(self) -> Dict[str, Any]:
        """Every figure the engine keeps, as a dict (``xfer_stats_*``): the
        counters of :meth:`stats`, ``enabled`` (False under XFER_TELEMETRY=0),
        ``submit_again``, ``retries``, ``timeouts``, ``errors`` (class name ->
        count, classes seen only), ``peers`` (handle -> that peer's figures),
        ``removed_peers`` (the totals of peers removed so far), ``nics`` (one
        dict per NIC, in order) and ``latency`` (kind name -> ``count``,
        ``sum_ns``, ``buckets``: 64 counts, bucket i for (2**(i-1), 2**i] ns).
        Readable after :meth:`close` too. See docs/python.md."""
        return _metrics.telemetry(self._core.h, self.nics)

    def set_telemetry(self, enable: bool) -> None:
        """Turns telemetry on or off (``xfer_engine_telemetry``; XFER_TELEMETRY=0
        sets it off at creation). While off, the figures stay as they were."""
        _lib.xfer_engine_telemetry(self._core.h, 1 if enable else 0)

    def metrics(self) -> str:
        """The same figures in the Prometheus text format (``xfer_stats_prometheus``)."""
        return _metrics.prometheus_text(self._core.h)

    def serve_metrics(self, port: int, host: str = "127.0.0.1") -> _metrics.MetricsServer:
        """Serves :meth:`metrics` at ``http://host:port/metrics`` from a daemon
        thread (stdlib http.server) until the server's ``close()`` or the
        engine's :meth:`close`. ``port`` 0 picks a free one (``server.port``).
        Loopback unless ``host`` says otherwise: the figures name peers."""
        check_int(port, "port", 0, 65535, "serve_metrics")
        core = self._core
        with core.ctl:
            if core.closed:
                raise shutdown("serve_metrics")
            server = _metrics.MetricsServer(core, host, port)
            core.metrics_servers.append(server)
        return server

    def trace(self, enable: bool = True) -> None:
        """Turns per-operation tracing on or off (benchmarks; see :meth:`read_traces`)."""
        _lib.xfer_engine_trace(self._core.h, 1 if enable else 0)

    def read_traces(self, max: int = 65536) -> List[Trace]:
        """Takes up to ``max`` trace records (oldest first)."""
        check_int(max, "max", 0, (1 << 63) - 1, "xfer_trace_read")
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


def _closed(core: "_Core", op: str, src: Any, dst: Any) -> Error:
    """The error for a closed region: Shutdown if the engine is what closed it."""
    if core.stopped:
        return shutdown(op)
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


def _own_peer(core: _Core, peer: Any, op: str) -> None:
    if type(peer) is not Peer or peer._core is not core:
        raise _not_our_peer(core, peer, op)


def _not_our_peer(core: _Core, peer: Any, op: str) -> Error:
    if not isinstance(peer, Peer):
        return wrong_type("peer", "a Peer", peer, op)
    return InvalidArgument(_errno.EINVAL, "peer is not a Peer of this engine", op)


def _own_group(core: _Core, group: Any, op: str) -> None:
    if not isinstance(group, Group):
        raise wrong_type("group", "a Group", group, op)
    if group._core is not core:
        raise InvalidArgument(_errno.EINVAL, "group is not a Group of this engine", op)


def _region_types(op: str, src: Any, dst: Any, src_want: Optional[str]) -> Error:
    """The error for a source that is no local Region or a destination that
    is no RemoteRegion (either would reach the library as the wrong handle)."""
    if type(dst) is not RemoteRegion:
        hint = " (import the peer's descriptor with Engine.import_region)" if isinstance(dst, Region) else ""
        return wrong_type("dst", "a RemoteRegion" + hint, dst, op)
    return wrong_type("src", src_want or "a Region or None", src, op)


def _why_write(op: str, keep: Any) -> Error:
    return _explain(_EINVAL, op, keep[0], keep[1])


def _why_scatter(op: str, keep: Any) -> Error:
    src, group, ents = keep[0], keep[1], keep[-1]
    return _explain_scatter(group, src, ents, op)
