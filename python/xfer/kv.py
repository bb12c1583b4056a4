"""Prefill/decode KV-cache transfer (``include/xfer_kv.h``), a thin ctypes layer.

The C module does the work (its own control thread, the engine's worker);
this file only mirrors its structures and calls::

    from xfer import kv

    layout = kv.Layout(kind=kv.GQA, layers=8, pages=1024, page_tokens=16,
                       kv_heads=8, head_dim=128, dtype_bytes=2, tp_size=1, tp_rank=0)
    pool = numpy.zeros(layout.nbytes, numpy.uint8)
    dec = kv.Decoder(layout, pool, ctx_bytes=4096, provider="tcp", nics="lo")
    group = dec.join([(prefiller_address, prefill_layout)])
    dec.admit(request_id, group, tokens=5000)
    for ev in dec.poll(timeout_ms=30000):
        ...                      # ev.pages, ev.ctx (bytes), ev.status
        dec.release(ev.id)

The prefill side is :class:`Prefiller`: ``poll`` for ``NEW`` requests, then
``bind`` its pages, ``layers_done`` after each layer, ``finish`` with the
extra context.

A KV pool is anything :meth:`xfer.Engine.register` takes: a numpy array or
other writable buffer, a torch tensor on the CPU or on a GPU (contiguous),
a CUDA-array-interface or DLPack object, or a raw ``(ptr, nbytes)`` tuple.
The Decoder or Prefiller keeps a reference to it (a raw pointer's memory is
the caller's to keep alive). With a GPU pool, tell the prefiller a layer is
done only once the GPU has finished writing it (an event or stream sync):
xfer moves the memory as it is when ``layers_done`` is called.
"""
from __future__ import annotations

import ctypes
from ctypes import POINTER, Structure, c_char_p, c_int, c_int32, c_size_t, c_uint8, c_uint32, c_uint64, c_void_p
from typing import List, NamedTuple, Optional, Sequence, Tuple

from . import _lib
from ._buffers import Device, Memory, resolve
from ._engine import check_device
from ._errors import InvalidArgument, check

GQA = 1
MLA = 2

GROUP_LIVE, GROUP_LEFT, GROUP_DEAD = 1, 2, 3
PF_NEW, PF_CANCELLED, PF_DONE, PF_LEFT = 1, 2, 3, 4

TP_MAX = 64
APP_MAX = 1024
_SEGS_MAX = 512


class Layout(Structure):
    """``struct xfer_kv_layout``: one rank's KV cache."""

    _fields_ = [(n, c_uint32) for n in (
        "kind", "layers", "pages", "page_tokens", "kv_heads", "head_dim", "dtype_bytes", "fused",
        "tp_size", "tp_rank")]

    @property
    def nbytes(self) -> int:
        return int(_f.layout_bytes(ctypes.byref(self)))

    def check(self) -> None:
        if _f.layout_check(ctypes.byref(self)) != 0:
            why = _f.layout_why(ctypes.byref(self))
            raise ValueError(why.decode() if why else "invalid layout")

    def offset(self, layer: int, page: int, head: int, component: int = 0) -> Optional[int]:
        """Byte offset of a head's K (0) or V (1) block in a page; None if not held here."""
        off = _f.offset(ctypes.byref(self), layer, page, head, component)
        return None if off == 2**64 - 1 else int(off)

    def with_rank(self, rank: int) -> "Layout":
        other = Layout.from_buffer_copy(self)
        other.tp_rank = rank
        return other


class _Seg(Structure):
    _fields_ = [("src_off", c_uint64), ("dst_off", c_uint64), ("len", c_uint64)]


class _Plan(Structure):
    _fields_ = [
        ("nsegs", c_uint32), ("writes_ctx", c_uint32),
        ("src_layer_stride", c_uint64), ("dst_layer_stride", c_uint64),
        ("src_page_stride", c_uint64), ("dst_page_stride", c_uint64),
        ("segs", _Seg * _SEGS_MAX),
    ]


class Plan(NamedTuple):
    """What one source rank writes to one destination rank, per layer."""

    segments: List[Tuple[int, int, int]]  # (src_off, dst_off, length) within a layer
    writes_ctx: bool
    src_layer_stride: int
    dst_layer_stride: int
    src_page_stride: int
    dst_page_stride: int

    def count(self, layers: int, npages: int) -> int:
        """Immediates the destination expects from this source."""
        return len(self.segments) * layers * npages + int(self.writes_ctx)


def plan(src: Layout, dst: Layout) -> Plan:
    p = _Plan()
    check(_f.plan(ctypes.byref(src), ctypes.byref(dst), ctypes.byref(p)), "xfer_kv_plan")
    return Plan([(p.segs[i].src_off, p.segs[i].dst_off, p.segs[i].len) for i in range(p.nsegs)],
                bool(p.writes_ctx), p.src_layer_stride, p.dst_layer_stride, p.src_page_stride,
                p.dst_page_stride)


class _DecConfig(Structure):
    _fields_ = [("layout", Layout), ("kv", c_void_p), ("ctx_bytes", c_uint32),
                ("max_requests", c_uint32), ("imm_base", c_uint32), ("imm_span", c_uint32),
                ("cancel_ms", c_uint64)]


class _PfConfig(Structure):
    _fields_ = [("layout", Layout), ("kv", c_void_p), ("ctx_bytes", c_uint32),
                ("max_jobs", c_uint32), ("job_timeout_ms", c_uint64)]


class _Rank(Structure):
    _fields_ = [("addr", c_void_p), ("addr_len", c_size_t), ("layout", Layout)]


class _Request(Structure):
    _fields_ = [("id", c_uint64), ("group", c_uint32), ("tokens", c_uint32),
                ("timeout_ms", c_uint64), ("app", c_void_p), ("app_len", c_uint32)]


class _DecEvent(Structure):
    _fields_ = [("id", c_uint64), ("status", c_int32), ("npages", c_uint32),
                ("pages", POINTER(c_uint32)), ("ctx", c_void_p), ("elapsed_ns", c_uint64)]


class _PfEvent(Structure):
    _fields_ = [("type", c_uint32), ("status", c_int32), ("id", c_uint64), ("tokens", c_uint32),
                ("npages", c_uint32), ("app_len", c_uint32), ("app", c_uint8 * APP_MAX)]


class DecoderEvent(NamedTuple):
    id: int
    status: int
    pages: List[int]
    ctx: bytes
    elapsed_ns: int


class PrefillEvent(NamedTuple):
    type: int
    status: int
    id: int
    tokens: int
    npages: int
    app: bytes


class _Functions:
    def __init__(self) -> None:
        L, P, p = _lib.clib, c_void_p, _lib._proto
        self.layout_check = p(L, "xfer_kv_layout_check", c_int, POINTER(Layout))
        self.layout_why = p(L, "xfer_kv_layout_why", c_char_p, POINTER(Layout))
        self.layout_bytes = p(L, "xfer_kv_layout_bytes", c_uint64, POINTER(Layout))
        self.offset = p(L, "xfer_kv_offset", c_uint64, POINTER(Layout), c_uint32, c_uint32, c_uint32, c_uint32)
        self.plan = p(L, "xfer_kv_plan", c_int, POINTER(Layout), POINTER(Layout), POINTER(_Plan))
        self.dec_config_init = p(L, "xfer_kv_dec_config_init", None, POINTER(_DecConfig))
        self.dec_create = p(L, "xfer_kv_decoder_create", c_int, POINTER(_DecConfig),
                            POINTER(_lib.xfer_attr), POINTER(P))
        self.dec_destroy = p(L, "xfer_kv_decoder_destroy", None, P)
        self.dec_engine = p(L, "xfer_kv_decoder_engine", P, P)
        self.dec_join = p(L, "xfer_kv_dec_join", c_int, P, POINTER(_Rank), c_uint32, POINTER(c_uint32))
        self.dec_leave = p(L, "xfer_kv_dec_leave", c_int, P, c_uint32)
        self.dec_group_state = p(L, "xfer_kv_dec_group_state", c_int, P, c_uint32)
        self.dec_admit = p(L, "xfer_kv_dec_admit", c_int, P, POINTER(_Request))
        self.dec_cancel = p(L, "xfer_kv_dec_cancel", c_int, P, c_uint64)
        self.dec_poll = p(L, "xfer_kv_dec_poll", c_int, P, POINTER(_DecEvent), c_int, c_uint64)
        self.dec_release = p(L, "xfer_kv_dec_release", c_int, P, c_uint64)
        self.dec_free_pages = p(L, "xfer_kv_dec_free_pages", c_uint32, P)
        self.pf_config_init = p(L, "xfer_kv_pf_config_init", None, POINTER(_PfConfig))
        self.pf_create = p(L, "xfer_kv_prefiller_create", c_int, POINTER(_PfConfig),
                           POINTER(_lib.xfer_attr), POINTER(P))
        self.pf_destroy = p(L, "xfer_kv_prefiller_destroy", None, P)
        self.pf_engine = p(L, "xfer_kv_prefiller_engine", P, P)
        self.pf_poll = p(L, "xfer_kv_pf_poll", c_int, P, POINTER(_PfEvent), c_int, c_uint64)
        self.pf_bind = p(L, "xfer_kv_pf_bind", c_int, P, c_uint64, POINTER(c_uint32), c_uint32)
        self.pf_layers_done = p(L, "xfer_kv_pf_layers_done", c_int, P, c_uint64, c_uint32)
        self.pf_finish = p(L, "xfer_kv_pf_finish", c_int, P, c_uint64, c_void_p, c_uint32)
        self.pf_leave = p(L, "xfer_kv_pf_leave", c_int, P)
        self.engine_addr = p(L, "xfer_engine_addr", c_int, P, c_void_p, c_size_t, POINTER(c_size_t))


_f = _Functions()


def _pool_memory(pool, need: int, op: str) -> Memory:
    """The pool's address, size and device, checked as registration will need
    it; the returned Memory's ``keep`` holds it alive."""
    mem = resolve(pool)
    if mem.nbytes < need:
        raise InvalidArgument(22, f"the KV pool has {mem.nbytes} bytes; the layout needs {need}", op)
    check_device(mem, op)
    return mem


def _attr(provider: Optional[str], nics: Optional[str], heartbeat_ms: Optional[int]):
    a = _lib.defaults()
    keep = []
    if provider is not None:
        keep.append(provider.encode())
        a.provider = keep[-1]
    if nics is not None:
        keep.append(nics.encode())
        a.nics = keep[-1]
    if heartbeat_ms is not None:
        a.heartbeat_ms = heartbeat_ms
    return a, keep


def _address(engine: int) -> bytes:
    buf = ctypes.create_string_buffer(2048)
    n = check(_f.engine_addr(engine, buf, len(buf), None), "xfer_engine_addr")
    return buf.raw[:n]


class Decoder:
    """A decode rank: its KV pool, prefill instances that join and leave, requests."""

    _h = None  # set once created: close() and __del__ work after a failed __init__

    def __init__(self, layout: Layout, pool, *, ctx_bytes: int = 0, max_requests: int = 256,
                 cancel_ms: Optional[int] = None, provider: Optional[str] = None,
                 nics: Optional[str] = None, heartbeat_ms: Optional[int] = None) -> None:
        layout.check()
        mem = _pool_memory(pool, layout.nbytes, "xfer_kv_decoder_create")
        self._pool = mem.keep
        self.pool_device: Device = mem.device
        c = _DecConfig()
        _f.dec_config_init(ctypes.byref(c))
        c.layout = layout
        c.kv = mem.ptr
        c.ctx_bytes = ctx_bytes
        c.max_requests = max_requests
        if cancel_ms is not None:
            c.cancel_ms = cancel_ms
        a, self._keep = _attr(provider, nics, heartbeat_ms)
        h = c_void_p()
        check(_f.dec_create(ctypes.byref(c), ctypes.byref(a), ctypes.byref(h)), "xfer_kv_decoder_create")
        self._h = h.value
        self.ctx_bytes = ctx_bytes
        self.layout = layout

    @property
    def address(self) -> bytes:
        return _address(_f.dec_engine(self._h))

    @property
    def provider(self) -> str:
        """The libfabric provider the engine runs on, e.g. "tcp;ofi_rxm"."""
        return (_lib.xfer_engine_provider(_f.dec_engine(self._h)) or b"").decode()

    def join(self, ranks: Sequence[Tuple[bytes, Layout]]) -> int:
        """A prefill instance joins: (address, layout) per TP rank, in rank order."""
        arr = (_Rank * len(ranks))()
        bufs = [ctypes.create_string_buffer(bytes(addr), len(addr)) for addr, _ in ranks]
        for i, (addr, lay) in enumerate(ranks):
            arr[i].addr = ctypes.addressof(bufs[i])
            arr[i].addr_len = len(addr)
            arr[i].layout = lay
        g = c_uint32()
        check(_f.dec_join(self._h, arr, len(ranks), ctypes.byref(g)), "xfer_kv_dec_join")
        return g.value

    def leave(self, group: int) -> None:
        check(_f.dec_leave(self._h, group), "xfer_kv_dec_leave")

    def group_state(self, group: int) -> int:
        return check(_f.dec_group_state(self._h, group), "xfer_kv_dec_group_state")

    def admit(self, request_id: int, group: int, tokens: int, *, timeout_ms: int = 0,
              app: bytes = b"") -> None:
        app_buf = ctypes.create_string_buffer(app, len(app)) if app else None
        r = _Request(request_id, group, tokens, timeout_ms,
                     ctypes.addressof(app_buf) if app_buf else None, len(app))
        check(_f.dec_admit(self._h, ctypes.byref(r)), "xfer_kv_dec_admit")

    def cancel(self, request_id: int) -> None:
        check(_f.dec_cancel(self._h, request_id), "xfer_kv_dec_cancel")

    def poll(self, max_events: int = 16, timeout_ms: int = 0) -> List[DecoderEvent]:
        evs = (_DecEvent * max_events)()
        n = check(_f.dec_poll(self._h, evs, max_events, timeout_ms), "xfer_kv_dec_poll")
        out = []
        for e in evs[:n]:
            ctx = ctypes.string_at(e.ctx, self.ctx_bytes) if e.ctx and self.ctx_bytes else b""
            out.append(DecoderEvent(e.id, e.status, e.pages[: e.npages], ctx, e.elapsed_ns))
        return out

    def release(self, request_id: int) -> None:
        check(_f.dec_release(self._h, request_id), "xfer_kv_dec_release")

    @property
    def free_pages(self) -> int:
        return int(_f.dec_free_pages(self._h))

    def close(self) -> None:
        if self._h:
            _f.dec_destroy(self._h)
            self._h = None

    def __enter__(self) -> "Decoder":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


class Prefiller:
    """A prefill rank: requests arrive as events; each layer's pages go out when told."""

    _h = None  # set once created: close() and __del__ work after a failed __init__

    def __init__(self, layout: Layout, pool, *, ctx_bytes: int = 0, max_jobs: int = 64,
                 job_timeout_ms: int = 0, provider: Optional[str] = None,
                 nics: Optional[str] = None, heartbeat_ms: Optional[int] = None) -> None:
        layout.check()
        mem = _pool_memory(pool, layout.nbytes, "xfer_kv_prefiller_create")
        self._pool = mem.keep
        self.pool_device: Device = mem.device
        c = _PfConfig()
        _f.pf_config_init(ctypes.byref(c))
        c.layout = layout
        c.kv = mem.ptr
        c.ctx_bytes = ctx_bytes
        c.max_jobs = max_jobs
        if job_timeout_ms:
            c.job_timeout_ms = job_timeout_ms
        a, self._keep = _attr(provider, nics, heartbeat_ms)
        h = c_void_p()
        check(_f.pf_create(ctypes.byref(c), ctypes.byref(a), ctypes.byref(h)), "xfer_kv_prefiller_create")
        self._h = h.value
        self.layout = layout

    @property
    def address(self) -> bytes:
        return _address(_f.pf_engine(self._h))

    @property
    def provider(self) -> str:
        """The libfabric provider the engine runs on, e.g. "tcp;ofi_rxm"."""
        return (_lib.xfer_engine_provider(_f.pf_engine(self._h)) or b"").decode()

    def poll(self, max_events: int = 16, timeout_ms: int = 0) -> List[PrefillEvent]:
        evs = (_PfEvent * max_events)()
        n = check(_f.pf_poll(self._h, evs, max_events, timeout_ms), "xfer_kv_pf_poll")
        return [PrefillEvent(e.type, e.status, e.id, e.tokens, e.npages, bytes(e.app[: e.app_len]))
                for e in evs[:n]]

    def bind(self, request_id: int, pages: Sequence[int]) -> None:
        arr = (c_uint32 * len(pages))(*pages)
        check(_f.pf_bind(self._h, request_id, arr, len(pages)), "xfer_kv_pf_bind")

    def layers_done(self, request_id: int, layers: int) -> None:
        check(_f.pf_layers_done(self._h, request_id, layers), "xfer_kv_pf_layers_done")

    def finish(self, request_id: int, ctx: bytes = b"") -> None:
        buf = ctypes.create_string_buffer(ctx, len(ctx)) if ctx else None
        check(_f.pf_finish(self._h, request_id, buf, len(ctx)), "xfer_kv_pf_finish")

    def leave(self) -> None:
        check(_f.pf_leave(self._h), "xfer_kv_pf_leave")

    def close(self) -> None:
        if self._h:
            _f.pf_destroy(self._h)
            self._h = None

    def __enter__(self) -> "Prefiller":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()
