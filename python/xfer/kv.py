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
import errno as _errno
from ctypes import byref, c_uint32, c_void_p
from dataclasses import dataclass
from typing import Any, List, NamedTuple, Optional, Sequence, Tuple

from . import _lib
from ._buffers import Device, Memory, resolve
from ._core import U32_MAX, U64_MAX, engine_address, make_attr
from ._errors import InvalidArgument, check, check_int, wrong_type
from ._region import check_device

GQA = _lib.XFER_KV_GQA
MLA = _lib.XFER_KV_MLA

GROUP_LIVE, GROUP_LEFT, GROUP_DEAD = _lib.XFER_KV_GROUP_LIVE, _lib.XFER_KV_GROUP_LEFT, _lib.XFER_KV_GROUP_DEAD
PF_NEW, PF_CANCELLED, PF_DONE, PF_LEFT = (
    _lib.XFER_KV_PF_NEW, _lib.XFER_KV_PF_CANCELLED, _lib.XFER_KV_PF_DONE, _lib.XFER_KV_PF_LEFT)

TP_MAX = _lib.XFER_KV_TP_MAX
APP_MAX = _lib.XFER_KV_APP_MAX

_LAYOUT_FIELDS = frozenset(f[0] for f in _lib.xfer_kv_layout._fields_)
_INT_MAX = (1 << 31) - 1


class Layout(_lib.xfer_kv_layout):
    """``struct xfer_kv_layout``: one rank's KV cache. Every field is a
    32-bit unsigned int, checked when set (ctypes alone would wrap)."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__()
        names = [f[0] for f in _lib.xfer_kv_layout._fields_]
        if len(args) > len(names):
            raise TypeError(f"Layout takes at most {len(names)} positional fields")
        for name, v in list(zip(names, args)) + list(kw.items()):
            setattr(self, name, v)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _LAYOUT_FIELDS:
            value = check_int(value, f"Layout.{name}", 0, U32_MAX, "xfer_kv_layout")
        elif not name.startswith("_"):
            raise AttributeError(f"Layout has no field {name!r}")
        super().__setattr__(name, value)

    @property
    def nbytes(self) -> int:
        return int(_lib.xfer_kv_layout_bytes(byref(self)))

    def check(self) -> None:
        if _lib.xfer_kv_layout_check(byref(self)) != 0:
            why = _lib.xfer_kv_layout_why(byref(self))
            raise ValueError(why.decode() if why else "invalid layout")

    def offset(self, layer: int, page: int, head: int, component: int = 0) -> Optional[int]:
        """Byte offset of a head's K (0) or V (1) block in a page; None if not held here."""
        args = [check_int(v, n, 0, U32_MAX, "xfer_kv_offset") for v, n in
                ((layer, "layer"), (page, "page"), (head, "head"), (component, "component"))]
        off = _lib.xfer_kv_offset(byref(self), *args)
        return None if off == U64_MAX else int(off)

    def with_rank(self, rank: int) -> "Layout":
        other = Layout.from_buffer_copy(self)
        other.tp_rank = rank
        return other


def _layout(layout: Any, what: str, op: str) -> Layout:
    if not isinstance(layout, _lib.xfer_kv_layout):
        raise wrong_type(what, "a kv.Layout", layout, op)
    return layout  # type: ignore[return-value]


@dataclass(frozen=True)
class Plan:
    """What one source rank writes to one destination rank, per layer.

    (A dataclass, not a NamedTuple: a tuple has a ``count`` of its own.)"""

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
    _layout(src, "src", "xfer_kv_plan")
    _layout(dst, "dst", "xfer_kv_plan")
    p = _lib.xfer_kv_plan_t()
    check(_lib.xfer_kv_plan(byref(src), byref(dst), byref(p)), "xfer_kv_plan")
    return Plan([(p.segs[i].src_off, p.segs[i].dst_off, p.segs[i].len) for i in range(p.nsegs)],
                bool(p.writes_ctx), p.src_layer_stride, p.dst_layer_stride, p.src_page_stride,
                p.dst_page_stride)


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


class DecoderStats(NamedTuple):
    """``struct xfer_kv_dec_stats``."""

    admitted: int
    completed: int
    failed: int
    cancelled: int
    cancel_acks: int
    revocations: int
    bytes_expected: int
    msgs_dropped: int


class PrefillStats(NamedTuple):
    """``struct xfer_kv_pf_stats``."""

    jobs: int
    jobs_failed: int
    requests: int
    cancels: int
    writes: int
    bytes: int
    writes_cut: int
    msgs_dropped: int


def _pool_memory(pool: Any, need: int, op: str) -> Memory:
    """The pool's address, size and device, checked as registration will need
    it; the returned Memory's ``keep`` holds it alive."""
    mem = resolve(pool)
    if mem.nbytes < need:
        raise InvalidArgument(_errno.EINVAL, f"the KV pool has {mem.nbytes} bytes; the layout needs {need}", op)
    check_device(mem, op)
    return mem


def _stats(fn: Any, h: Any, cls: Any, tup: Any) -> Any:
    s = cls()
    fn(h, byref(s))
    return tup(*[int(getattr(s, f[0])) for f in cls._fields_])


class _Side:
    """What a Decoder and a Prefiller share: the handle, its engine's
    identity, and closing."""

    _h: Optional[int] = None  # set once created: close() and __del__ work after a failed __init__
    _engine_fn: Any = None
    _destroy_fn: Any = None

    @property
    def _engine(self) -> int:
        if not self._h:
            raise InvalidArgument(_errno.EINVAL, "closed", type(self).__name__)
        return int(type(self)._engine_fn(self._h))

    @property
    def address(self) -> bytes:
        return engine_address(self._engine)

    @property
    def provider(self) -> str:
        """The libfabric provider the engine runs on, e.g. "tcp;ofi_rxm"."""
        return (_lib.xfer_engine_provider(self._engine) or b"").decode()

    def close(self) -> None:
        if self._h:
            type(self)._destroy_fn(self._h)
            self._h = None

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


class Decoder(_Side):
    """A decode rank: its KV pool, prefill instances that join and leave, requests."""

    _engine_fn = _lib.xfer_kv_decoder_engine
    _destroy_fn = _lib.xfer_kv_decoder_destroy

    def __init__(self, layout: Layout, pool: Any, *, ctx_bytes: int = 0, max_requests: int = 256,
                 cancel_ms: Optional[int] = None, provider: Optional[str] = None,
                 nics: Optional[str] = None, heartbeat_ms: Optional[int] = None) -> None:
        op = "xfer_kv_decoder_create"
        _layout(layout, "layout", op).check()
        c = _lib.xfer_kv_dec_config()
        _lib.xfer_kv_dec_config_init(byref(c))
        c.ctx_bytes = check_int(ctx_bytes, "ctx_bytes", 0, U32_MAX, op)
        c.max_requests = check_int(max_requests, "max_requests", 0, U32_MAX, op)
        if cancel_ms is not None:
            c.cancel_ms = check_int(cancel_ms, "cancel_ms", 0, U64_MAX, op)
        a, self._keep = make_attr(op, provider, nics, heartbeat_ms=heartbeat_ms)
        mem = _pool_memory(pool, layout.nbytes, op)
        self._pool = mem.keep
        self.pool_device: Device = mem.device
        c.layout = layout
        c.kv = mem.ptr
        h = c_void_p()
        check(_lib.xfer_kv_decoder_create(byref(c), byref(a), byref(h)), op)
        self._h = h.value
        self.ctx_bytes = ctx_bytes
        self.layout = layout

    def join(self, ranks: Sequence[Tuple[bytes, Layout]]) -> int:
        """A prefill instance joins: (address, layout) per TP rank, in rank order."""
        op = "xfer_kv_dec_join"
        arr = (_lib.xfer_kv_rank * len(ranks))()
        bufs = []
        for i, rank in enumerate(ranks):
            try:
                addr, lay = rank
            except (TypeError, ValueError):
                raise wrong_type(f"ranks[{i}]", "an (address, Layout) pair", rank, op) from None
            if not isinstance(addr, (bytes, bytearray, memoryview)):
                raise wrong_type(f"ranks[{i}] address", "bytes", addr, op)
            bufs.append(ctypes.create_string_buffer(bytes(addr), len(addr)))
            arr[i].addr = ctypes.addressof(bufs[i])
            arr[i].addr_len = len(addr)
            arr[i].layout = _layout(lay, f"ranks[{i}] layout", op)
        g = c_uint32()
        check(_lib.xfer_kv_dec_join(self._h, arr, len(ranks), byref(g)), op)
        return g.value

    def leave(self, group: int) -> None:
        check(_lib.xfer_kv_dec_leave(self._h, check_int(group, "group", 0, U32_MAX, "xfer_kv_dec_leave")),
              "xfer_kv_dec_leave")

    def group_state(self, group: int) -> int:
        op = "xfer_kv_dec_group_state"
        return check(_lib.xfer_kv_dec_group_state(self._h, check_int(group, "group", 0, U32_MAX, op)), op)

    def admit(self, request_id: int, group: int, tokens: int, *, timeout_ms: int = 0,
              app: bytes = b"") -> None:
        op = "xfer_kv_dec_admit"
        if not isinstance(app, (bytes, bytearray)):
            raise wrong_type("app", "bytes", app, op)
        app_buf = ctypes.create_string_buffer(bytes(app), len(app)) if app else None
        r = _lib.xfer_kv_request(
            check_int(request_id, "request_id", 0, U64_MAX, op), check_int(group, "group", 0, U32_MAX, op),
            check_int(tokens, "tokens", 0, U32_MAX, op), check_int(timeout_ms, "timeout_ms", 0, U64_MAX, op),
            ctypes.addressof(app_buf) if app_buf else None, len(app))
        check(_lib.xfer_kv_dec_admit(self._h, byref(r)), op)

    def cancel(self, request_id: int) -> None:
        op = "xfer_kv_dec_cancel"
        check(_lib.xfer_kv_dec_cancel(self._h, check_int(request_id, "request_id", 0, U64_MAX, op)), op)

    def poll(self, max_events: int = 16, timeout_ms: int = 0) -> List[DecoderEvent]:
        op = "xfer_kv_dec_poll"
        check_int(max_events, "max_events", 1, _INT_MAX, op)
        evs = (_lib.xfer_kv_dec_event * max_events)()
        n = check(_lib.xfer_kv_dec_poll(self._h, evs, max_events, check_int(timeout_ms, "timeout_ms", 0, U64_MAX, op)), op)
        out = []
        for e in evs[:n]:
            ctx = ctypes.string_at(e.ctx, self.ctx_bytes) if e.ctx and self.ctx_bytes else b""
            out.append(DecoderEvent(e.id, e.status, e.pages[: e.npages], ctx, e.elapsed_ns))
        return out

    def release(self, request_id: int) -> None:
        op = "xfer_kv_dec_release"
        check(_lib.xfer_kv_dec_release(self._h, check_int(request_id, "request_id", 0, U64_MAX, op)), op)

    @property
    def free_pages(self) -> int:
        return int(_lib.xfer_kv_dec_free_pages(self._h))

    def stats(self) -> DecoderStats:
        """``xfer_kv_dec_stats``."""
        return _stats(_lib.xfer_kv_dec_stats, self._h, _lib.xfer_kv_dec_stats_t, DecoderStats)  # type: ignore[no-any-return]

    def __enter__(self) -> "Decoder":
        return self


class Prefiller(_Side):
    """A prefill rank: requests arrive as events; each layer's pages go out when told."""

    _engine_fn = _lib.xfer_kv_prefiller_engine
    _destroy_fn = _lib.xfer_kv_prefiller_destroy

    def __init__(self, layout: Layout, pool: Any, *, ctx_bytes: int = 0, max_jobs: int = 64,
                 job_timeout_ms: int = 0, provider: Optional[str] = None,
                 nics: Optional[str] = None, heartbeat_ms: Optional[int] = None) -> None:
        op = "xfer_kv_prefiller_create"
        _layout(layout, "layout", op).check()
        c = _lib.xfer_kv_pf_config()
        _lib.xfer_kv_pf_config_init(byref(c))
        c.ctx_bytes = check_int(ctx_bytes, "ctx_bytes", 0, U32_MAX, op)
        c.max_jobs = check_int(max_jobs, "max_jobs", 0, U32_MAX, op)
        if job_timeout_ms:
            c.job_timeout_ms = check_int(job_timeout_ms, "job_timeout_ms", 0, U64_MAX, op)
        a, self._keep = make_attr(op, provider, nics, heartbeat_ms=heartbeat_ms)
        mem = _pool_memory(pool, layout.nbytes, op)
        self._pool = mem.keep
        self.pool_device: Device = mem.device
        c.layout = layout
        c.kv = mem.ptr
        h = c_void_p()
        check(_lib.xfer_kv_prefiller_create(byref(c), byref(a), byref(h)), op)
        self._h = h.value
        self.layout = layout

    def poll(self, max_events: int = 16, timeout_ms: int = 0) -> List[PrefillEvent]:
        op = "xfer_kv_pf_poll"
        check_int(max_events, "max_events", 1, _INT_MAX, op)
        evs = (_lib.xfer_kv_pf_event * max_events)()
        n = check(_lib.xfer_kv_pf_poll(self._h, evs, max_events, check_int(timeout_ms, "timeout_ms", 0, U64_MAX, op)), op)
        return [PrefillEvent(e.type, e.status, e.id, e.tokens, e.npages, bytes(e.app[: e.app_len]))
                for e in evs[:n]]

    def bind(self, request_id: int, pages: Sequence[int]) -> None:
        op = "xfer_kv_pf_bind"
        check_int(request_id, "request_id", 0, U64_MAX, op)
        arr = (c_uint32 * len(pages))(*[check_int(p, f"pages[{i}]", 0, U32_MAX, op) for i, p in enumerate(pages)])
        check(_lib.xfer_kv_pf_bind(self._h, request_id, arr, len(pages)), op)

    def layers_done(self, request_id: int, layers: int) -> None:
        op = "xfer_kv_pf_layers_done"
        check(_lib.xfer_kv_pf_layers_done(self._h, check_int(request_id, "request_id", 0, U64_MAX, op),
                                          check_int(layers, "layers", 0, U32_MAX, op)), op)

    def finish(self, request_id: int, ctx: bytes = b"") -> None:
        op = "xfer_kv_pf_finish"
        check_int(request_id, "request_id", 0, U64_MAX, op)
        if not isinstance(ctx, (bytes, bytearray)):
            raise wrong_type("ctx", "bytes", ctx, op)
        buf = ctypes.create_string_buffer(bytes(ctx), len(ctx)) if ctx else None
        check(_lib.xfer_kv_pf_finish(self._h, request_id, buf, len(ctx)), op)

    def leave(self) -> None:
        check(_lib.xfer_kv_pf_leave(self._h), "xfer_kv_pf_leave")

    def stats(self) -> PrefillStats:
        """``xfer_kv_pf_stats``."""
        return _stats(_lib.xfer_kv_pf_stats, self._h, _lib.xfer_kv_pf_stats_t, PrefillStats)  # type: ignore[no-any-return]

    def __enter__(self) -> "Prefiller":
        return self
