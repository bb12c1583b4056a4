"""Expert-parallel MoE dispatch and combine (``include/xfer_moe.h``, docs/moe.md).

The shape of DeepEP's low-latency API and pplx-kernels: an object built once
per layer shape and rank group, then per micro-batch::

    import torch, xfer
    from xfer import moe

    group = moe.RankGroup(rank, world_size, all_gather)       # all_gather(bytes) -> [bytes]
    ep = moe.MoE(group, max_tokens=128, num_experts=256, topk=8, hidden=7168,
                 dispatch_dtype=torch.float8_e4m3fn, device="cuda")
    d = ep.dispatch(x, topk_idx, topk_weights)                # x: [n, 7168] bf16
    # d.expert_x: [256/W, capacity, 7168] fp8, d.expert_scales, d.expert_counts: [256/W]
    y = experts(d.expert_x, d.expert_scales, d.expert_counts) # [256/W, capacity, 7168] bf16
    out = ep.combine(y, d.handle)                             # [n, 7168] bf16

Each of dispatch and combine has a send and a receive half
(``do_send=True, do_recv=False``, later ``do_send=False, do_recv=True,
handle=...``), so that one micro-batch's communication overlaps another's
compute; use one MoE object per micro-batch in flight. On a GPU every half
only launches kernels on torch's current stream (CUDA-graph capturable);
on the CPU (``device="cpu"``) the halves run the same protocol with host
tensors and block.

Output tensors (expert_x, scales, counts, the combine's output) belong to
the object and are overwritten by its next dispatch or combine, as in DeepEP.
Failures (a dead rank, a deadline, a capacity exceeded) end the object: the
call that sees it raises an :class:`xfer.Error` naming the rank and round,
and so does every later call.
"""
from __future__ import annotations

import ctypes
import hashlib
import socket
import struct
import weakref
from ctypes import byref, c_size_t, c_uint32, c_void_p
from typing import Any, Callable, List, NamedTuple, Optional, Sequence

from . import _lib
from . import _moe_lib as ml
from ._errors import InvalidArgument, NotSupported, error_for

__all__ = ["RankGroup", "MoE", "DispatchResult", "Handle", "MoEStats", "buffer_sizes"]

AllGather = Callable[[bytes], List[bytes]]


def _torch():
    try:
        import torch
    except ImportError as ex:  # pragma: no cover - the tests skip without torch
        raise NotSupported(95, "xfer.moe needs PyTorch", "xfer.moe") from ex
    return torch


def _host_key() -> str:
    """Ranks with the same key are on one host (CUDA IPC between them)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            boot = fh.read().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}/{boot}"


class RankGroup:
    """The ranks of one expert-parallel group and how to exchange bytes.

    ``all_gather(data)`` must return every rank's ``data`` in rank order (this
    rank's own included); it is called a few times while an MoE object is
    built, by every rank in the same order. ``host_of`` optionally overrides
    which ranks share a host (a list of W host ids); by default ranks with the
    same hostname and boot id do.
    """

    def __init__(self, rank: int, world_size: int, all_gather: AllGather,
                 host_of: Optional[Sequence[int]] = None):
        if not 0 <= rank < world_size:
            raise InvalidArgument(22, f"rank {rank} is not in a group of {world_size}", "RankGroup")
        if host_of is not None and len(host_of) != world_size:
            raise InvalidArgument(22, f"host_of has {len(host_of)} entries for {world_size} ranks",
                                  "RankGroup")
        self.rank, self.world_size, self._all_gather = rank, world_size, all_gather
        self.host_of = list(host_of) if host_of is not None else None

    @classmethod
    def from_torch(cls, group: Any = None, host_of: Optional[Sequence[int]] = None) -> "RankGroup":
        """A torch.distributed process group (the default one when None)."""
        dist = _torch().distributed

        def gather(data: bytes) -> List[bytes]:
            out: List[Any] = [None] * dist.get_world_size(group)
            dist.all_gather_object(out, data, group=group)
            return [bytes(o) for o in out]

        return cls(dist.get_rank(group), dist.get_world_size(group), gather, host_of)

    def all_gather(self, data: bytes) -> List[bytes]:
        out = [bytes(b) for b in self._all_gather(bytes(data))]
        if len(out) != self.world_size:
            raise InvalidArgument(22, f"all_gather returned {len(out)} items for {self.world_size} ranks",
                                  "RankGroup.all_gather")
        return out


class MoEStats(NamedTuple):
    """The host proxy's work (xfer_moe_get_stats), summed over rounds."""

    rounds: int
    combines: int
    busy_ns: int
    route_to_rows_ns: int
    route_to_recv_ns: int
    comb_to_flag_ns: int
    private_records: int
    overflow_records: int
    bytes_sent: int


class Handle:
    """What combine needs of a dispatch: its round, tokens and routing.

    ``src_rank`` and ``src_token`` say, per expert row, which rank and which
    of its tokens the row came from (rows past an expert's count are stale).
    """

    def __init__(self, owner: "MoE", round_: int, n: int, topk_idx: Any, topk_weights: Any):
        self._owner = weakref.ref(owner)
        self.round, self.num_tokens = round_, n
        self.topk_idx, self.topk_weights = topk_idx, topk_weights
        self.received = False
        self.src_rank = owner._src_rank
        self.src_token = owner._src_token

    def __repr__(self) -> str:
        return f"<xfer.moe.Handle round {self.round}, {self.num_tokens} tokens>"


class DispatchResult(NamedTuple):
    """expert_x: [L, capacity, H] (padded) or [capacity, H] (packed), the
    dispatch dtype; expert_scales: the same rows x H/128 float32 (fp8) or None;
    expert_counts: [L] int32 rows per local expert; expert_offsets: [L+1]
    int32, the first row of each expert (padded: e * capacity)."""

    expert_x: Any
    expert_scales: Any
    expert_counts: Any
    expert_offsets: Any
    handle: Handle


def _config(world: int, rank: int, *, max_tokens: int, num_experts: int, topk: int, hidden: int,
            fp8: bool, private_tokens: Optional[int], overflow_tokens: Optional[int], layout: str,
            expert_capacity: Optional[int], expert_align: Optional[int], timeout_ms: int) -> ml.Config:
    c = ml.Config()
    ml.f.config_init(byref(c))
    c.world_size, c.rank, c.num_experts, c.topk = world, rank, num_experts, topk
    c.hidden, c.max_tokens = hidden, max_tokens
    c.dispatch_bytes, c.scales, c.combine_bytes = (1, 1, 2) if fp8 else (2, 0, 2)
    if layout not in ("padded", "packed"):
        raise InvalidArgument(22, f"layout must be 'padded' or 'packed', not {layout!r}", "xfer.moe.MoE")
    c.layout = ml.PACKED if layout == "packed" else ml.PADDED
    for name, v in (("private_tokens", private_tokens), ("overflow_tokens", overflow_tokens),
                    ("expert_capacity", expert_capacity), ("expert_align", expert_align)):
        if v is not None:
            if not 0 <= v < ml.AUTO:
                raise InvalidArgument(22, f"{name} = {v} is out of range", "xfer.moe.MoE")
            setattr(c, name, v)
    c.timeout_ms = timeout_ms
    why = ml.f.config_why(byref(c))
    if why:
        raise InvalidArgument(22, f"invalid MoE configuration: {why.decode()}", "xfer.moe.MoE")
    ml.f.config_resolve(byref(c))
    return c


def buffer_sizes(world_size: int, *, max_tokens: int, num_experts: int, topk: int, hidden: int,
                 fp8: bool = False, remote_ranks: Optional[int] = None, **kw: Any) -> dict:
    """Every buffer of one rank in bytes (xfer_moe_sizes; formulas in docs/moe.md).

    remote_ranks: ranks reached through the engine (default: all others)."""
    c = _config(world_size, 0, max_tokens=max_tokens, num_experts=num_experts, topk=topk, hidden=hidden,
                fp8=fp8, private_tokens=kw.get("private_tokens"), overflow_tokens=kw.get("overflow_tokens"),
                layout=kw.get("layout", "padded"), expert_capacity=kw.get("expert_capacity"),
                expert_align=kw.get("expert_align"), timeout_ms=30000)
    if remote_ranks is not None:
        hosts = (c_uint32 * world_size)(*[0 if r <= world_size - 1 - remote_ranks else r + 1
                                          for r in range(world_size)])
        c.host_of = hosts
    return _sizes_dict(_sizes(c))


def _sizes(c: ml.Config) -> ml.Sizes:
    """xfer_moe_sizes of a checked configuration."""
    z = ml.Sizes()
    rc = ml.f.sizes(byref(c), byref(z))
    if rc:
        raise error_for(rc, "xfer_moe_sizes")
    return z


def _sizes_dict(z: ml.Sizes) -> dict:
    return {name: getattr(z, name) for name, _ in ml.Sizes._fields_}


def _c_blobs(blobs: List[bytes]):
    """Byte strings as the C calls take them: (void *[], size_t[], the buffers
    behind the pointers, which the caller keeps alive across the call)."""
    keep = [ctypes.create_string_buffer(x, len(x) or 1) for x in blobs]
    ptrs = (c_void_p * len(blobs))(*[ctypes.addressof(x) for x in keep])
    lens = (c_size_t * len(blobs))(*[len(x) for x in blobs])
    return ptrs, lens, keep


_INFO = struct.Struct("<32s32s16sI")  # config digest, host key digest, GPU uuid, flags


class MoE:
    """One expert-parallel MoE layer shape on one rank group (see the module doc).

    Arguments: ``max_tokens`` per rank and round; ``num_experts`` (a
    multiple of the world size), ``topk``, ``hidden`` (a multiple of 16; of
    128 for fp8); ``dispatch_dtype`` torch.bfloat16 or torch.float8_e4m3fn
    (one float32 scale per 128 channels); ``combine_dtype`` torch.bfloat16;
    ``device`` "cpu" (the CPU path) or a CUDA device; ``layout`` "padded"
    ([L, expert_capacity, H]) or "packed" ([expert_capacity, H], experts
    aligned to ``expert_align`` rows); ``private_tokens`` / ``overflow_tokens``
    size the receive buffer of remote ranks' tokens; ``timeout_ms`` the
    deadline of a round; ``provider``/``nics``/``heartbeat_ms`` the engine
    (docs/config.md); ``same_host``: False sends everything through the engine
    even between ranks of one host; ``gpu_wait`` "auto", "kernel" or "stream"
    (auto: stream when same-host ranks share a GPU without MPS, else kernel;
    ``ep.gpu_wait`` and ``ep.mps`` say what was chosen).
    """

    _m = None
    _g = None

    def __init__(self, group: RankGroup, *, max_tokens: int, num_experts: int, topk: int, hidden: int,
                 dispatch_dtype: Any = None, combine_dtype: Any = None, device: Any = None,
                 private_tokens: Optional[int] = None, overflow_tokens: Optional[int] = None,
                 layout: str = "padded", expert_capacity: Optional[int] = None,
                 expert_align: Optional[int] = None, timeout_ms: int = 30000,
                 provider: Optional[str] = None, nics: Optional[str] = None,
                 heartbeat_ms: Optional[int] = 1000, same_host: bool = True, gpu_wait: str = "auto"):
        torch = _torch()
        self._torch = torch
        dispatch_dtype = dispatch_dtype or torch.bfloat16
        combine_dtype = combine_dtype or torch.bfloat16
        fp8 = getattr(torch, "float8_e4m3fn", None)
        if dispatch_dtype not in (torch.bfloat16, fp8) or dispatch_dtype is None:
            raise InvalidArgument(22, f"dispatch_dtype must be torch.bfloat16 or torch.float8_e4m3fn, "
                                  f"not {dispatch_dtype}", "xfer.moe.MoE")
        if combine_dtype != torch.bfloat16:
            raise InvalidArgument(22, f"combine_dtype must be torch.bfloat16, not {combine_dtype}", "xfer.moe.MoE")
        self.device = torch.device(device if device is not None else "cpu")
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        if self.device.type not in ("cpu", "cuda"):
            raise InvalidArgument(22, f"device must be cpu or cuda, not {self.device}", "xfer.moe.MoE")
        self.gpu = self.device.type == "cuda"
        self.group, self.rank, self.world_size = group, group.rank, group.world_size
        self.dispatch_dtype, self.combine_dtype = dispatch_dtype, combine_dtype
        self.fp8 = dispatch_dtype == fp8
        self.max_tokens, self.num_experts, self.topk, self.hidden = max_tokens, num_experts, topk, hidden
        cfg = _config(self.world_size, self.rank, max_tokens=max_tokens, num_experts=num_experts, topk=topk,
                      hidden=hidden, fp8=self.fp8, private_tokens=private_tokens,
                      overflow_tokens=overflow_tokens, layout=layout, expert_capacity=expert_capacity,
                      expert_align=expert_align, timeout_ms=timeout_ms)
        self.layout = layout
        # Every rank must have built the same configuration; and who shares a host.
        uuid = b""
        if self.gpu:  # which physical GPU: ranks sharing one wait on the stream by default
            props = torch.cuda.get_device_properties(self.device)
            ident = str(getattr(props, "uuid", "")) or f"{props.name}/{self.device.index}"
            uuid = hashlib.sha256(ident.encode()).digest()[:16]
        digest = hashlib.sha256(repr([getattr(cfg, n) for n, _ in ml.Config._fields_
                                      if n not in ("rank", "host_of")]).encode()).digest()
        key = hashlib.sha256(_host_key().encode()).digest()
        infos = group.all_gather(_INFO.pack(digest, key, uuid[:16].ljust(16, b"\0"), int(self.gpu)))
        parsed = [_INFO.unpack(b) if len(b) == _INFO.size else None for b in infos]
        for r, p in enumerate(parsed):
            if p is None or p[0] != digest or p[3] != int(self.gpu):
                raise InvalidArgument(22, f"rank {r} built its MoE with another configuration, or on "
                                      f"{'the CPU' if self.gpu else 'a GPU'}", "xfer.moe.MoE")
        if not self.gpu or not same_host:
            hosts = None  # every rank through the engine (the CPU path has no IPC)
        elif group.host_of is not None:
            hosts = list(group.host_of)
        else:
            ids: dict = {}
            hosts = [ids.setdefault(p[1], len(ids)) for p in parsed]
        self.host_of = hosts
        self._hosts = (c_uint32 * self.world_size)(*hosts) if hosts is not None else None
        cfg.host_of = self._hosts
        self._cfg = cfg
        z = _sizes(cfg)
        self.sizes = _sizes_dict(z)
        self.local_experts = z.local_experts
        self.expert_rows = z.expert_rows
        self.expert_capacity = cfg.expert_capacity
        self.remote_ranks = z.remote_ranks
        # Processes on one physical GPU are time-sliced unless the CUDA MPS
        # daemon runs: then a spinning wait kernel would hold the slice its
        # peer needs. Stream waits hold no SM; auto uses them when this GPU is
        # shared without MPS and every flag waited on is in GPU memory (no
        # remote ranks: the proxy's flags are host memory). Under MPS the
        # processes' kernels run at once, as on GPUs of their own: kernel.
        shares_gpu = self.gpu and any(r != self.rank and parsed[r][1] == key and parsed[r][2] == uuid
                                      for r in range(self.world_size))
        if gpu_wait not in ("auto", "kernel", "stream"):
            raise InvalidArgument(22, f"gpu_wait must be auto, kernel or stream, not {gpu_wait!r}", "xfer.moe.MoE")
        self.mps = False  # whether the GPU's contexts are shared through MPS (set below)
        self.gpu_wait = gpu_wait if self.gpu else "cpu"  # auto: resolved below

        attr = _lib.defaults()
        self._keep = []
        for name, v in (("provider", provider), ("nics", nics)):
            if v is not None:
                self._keep.append(v.encode())
                setattr(attr, name, self._keep[-1])
        if heartbeat_ms is not None:
            attr.heartbeat_ms = heartbeat_ms
        # Build, then tell everyone whether it worked, so that no rank waits
        # forever in all_gather for one that raised.
        err: Optional[BaseException] = None
        local = b""
        try:
            bufs = None
            if self.gpu:
                self.mps = ml.g.cuda_mps_enabled(self.device.index) > 0
                if gpu_wait == "auto":
                    self.gpu_wait = "stream" if shares_gpu and not self.mps and not z.remote_ranks else "kernel"
                bufs = ml.Buffers()
                h = c_void_p()
                wait = ml.WAIT_STREAM if self.gpu_wait == "stream" else ml.WAIT_KERNEL
                rc = ml.g.cuda_create(byref(cfg), self.device.index, wait, byref(bufs), byref(h))
                if rc:
                    raise error_for(rc, "xfer_moe_cuda_create", ml.cuda_error())
                self._g = h.value
            h = c_void_p()
            rc = ml.f.create(byref(cfg), byref(attr), byref(bufs) if bufs is not None else None, byref(h))
            if rc:
                raise error_for(rc, "xfer_moe_create")
            self._m = h.value
            if self._g:
                ml.f.set_release(self._m, ml.release_fn_ptr(), self._g)
            local = self._local_info()
        except BaseException as ex:  # noqa: B902 - re-raised below, after telling the others
            err = ex
        blobs = group.all_gather((b"\1" + local) if err is None else b"\0")
        if err is not None:
            self.close()
            raise err
        bad = [r for r, b in enumerate(blobs) if not b or b[:1] != b"\1"]
        if bad:
            self.close()
            raise NotSupported(95, f"ranks {bad} could not build their MoE", "xfer.moe.MoE")
        self._connect([b[1:] for b in blobs])
        self._alloc_outputs()
        self._state = "idle"
        self._round = 0
        self._handle: Optional[Handle] = None

    # ---------------------------------------------------------------- setup

    def _local_info(self) -> bytes:
        need = c_size_t()
        ml.f.local_info(self._m, None, 0, byref(need))
        buf = ctypes.create_string_buffer(need.value)
        n = ml.f.local_info(self._m, buf, need.value, None)
        if n < 0:
            raise error_for(n, "xfer_moe_local_info")
        ipc = b""
        if self._g:
            ib = ctypes.create_string_buffer(4096)
            k = ml.g.cuda_ipc_info(self._g, ib, 4096)
            if k < 0:
                raise error_for(k, "xfer_moe_cuda_ipc_info", ml.cuda_error())
            ipc = ib.raw[:k]
        return struct.pack("<II", n, len(ipc)) + buf.raw[:n] + ipc

    def _connect(self, blobs: List[bytes]) -> None:
        infos, ipcs = [], []
        for r, b in enumerate(blobs):
            if len(b) < 8:
                raise InvalidArgument(22, f"rank {r} sent {len(b)} bytes of connection information", "xfer.moe.MoE")
            n, k = struct.unpack_from("<II", b)
            if len(b) != 8 + n + k:
                raise InvalidArgument(22, f"rank {r}'s connection information is truncated", "xfer.moe.MoE")
            infos.append(b[8:8 + n])
            ipcs.append(b[8 + n:])
        ptrs, lens, _keep = _c_blobs(infos)
        rc = ml.f.connect(self._m, ptrs, lens)
        if rc:
            self.close()
            raise error_for(rc, "xfer_moe_connect")
        if self._g:
            gp, gl, _gkeep = _c_blobs(ipcs)
            rc = ml.g.cuda_connect(self._g, gp, gl)
            if rc:
                msg = ml.cuda_error()
                self.close()
                raise error_for(rc, "xfer_moe_cuda_connect", msg)

    def _alloc_outputs(self) -> None:
        torch, dev = self._torch, self.device
        rows, H, L = self.expert_rows, self.hidden, self.local_experts
        shape = (L, self.expert_capacity, H) if self.layout == "padded" else (rows, H)
        self._expert_x = torch.empty(shape, dtype=self.dispatch_dtype, device=dev)
        self._expert_scales = (torch.empty(shape[:-1] + (H // ml.SCALE_BLOCK,), dtype=torch.float32, device=dev)
                               if self.fp8 else None)
        self._counts = torch.zeros(L, dtype=torch.int32, device=dev)
        self._offsets = torch.zeros(L + 1, dtype=torch.int32, device=dev)
        self._src_rank = torch.full(shape[:-1], -1, dtype=torch.int32, device=dev)
        self._src_token = torch.full(shape[:-1], -1, dtype=torch.int32, device=dev)
        self._out = torch.empty((self.max_tokens, H), dtype=self.combine_dtype, device=dev)

    # ------------------------------------------------------------- checking

    def check(self) -> None:
        """Raises the failure that ended this object, if any."""
        if not self._m:
            raise error_for(-108, "xfer.moe", "the MoE object is closed")  # ESHUTDOWN
        buf = ctypes.create_string_buffer(512)
        who = c_uint32()
        rc = ml.f.status(self._m, buf, 512, byref(who))
        if rc:
            raise error_for(rc, "xfer.moe", buf.value.decode(errors="replace"))

    @property
    def failed(self) -> bool:
        if not self._m:
            return True
        return ml.f.status(self._m, None, 0, None) != 0

    def _tensor(self, t: Any, name: str, shape: tuple, dtypes: tuple) -> Any:
        torch = self._torch
        if not isinstance(t, torch.Tensor):
            raise InvalidArgument(22, f"{name} must be a torch.Tensor, not {type(t).__name__}", "xfer.moe")
        if t.device != self.device:
            raise InvalidArgument(22, f"{name} is on {t.device}; this MoE runs on {self.device}", "xfer.moe")
        if t.dtype not in dtypes:
            raise InvalidArgument(22, f"{name} is {t.dtype}; want {' or '.join(map(str, dtypes))}", "xfer.moe")
        if tuple(t.shape) != tuple(shape):
            raise InvalidArgument(22, f"{name} has shape {tuple(t.shape)}; want {tuple(shape)}", "xfer.moe")
        if not t.is_contiguous():
            raise InvalidArgument(22, f"{name} must be contiguous", "xfer.moe")
        if t.numel() and t.data_ptr() % 16:
            raise InvalidArgument(22, f"{name} must start on a 16-byte boundary (the kernels copy 16 "
                                  "bytes at a time)", "xfer.moe")
        return t

    def _ctl(self) -> Any:
        """The control words the kernels (or the CPU path) and the proxy share
        (struct xfer_moe_ctl), read in place."""
        b = ml.Buffers()
        ml.f.get_buffers(self._m, byref(b))
        return ml.Ctl.from_address(b.ctl)

    def _stream(self) -> int:
        return self._torch.cuda.current_stream(self.device).cuda_stream

    def _host_prewait(self, flag: str) -> None:
        """Engine path, eager launches: waits on the host for the proxy's flag
        (recv_flag, comb_flag) before queueing the kernels behind its GPU wait.
        A wait spinning on the proxy while this process makes a synchronizing
        CUDA call (tensor.cpu() into pageable memory, a lazily loaded kernel)
        deadlocks until the deadline: that call holds back the engine's
        staging copies, which the proxy needs (the second GPU run: gpu-2-engine
        hung with the proxy's route and token scatters outstanding, while the
        benchmark, which only synchronizes, passed). The CPU path's protocol on
        the same flag; advisory all the same (the GPU wait still lowers the
        flag and orders the kernels), bounded by the deadline, and a failure
        raises every flag. Not while a graph is captured: there the GPU waits."""
        if not self.remote_ranks or self._torch.cuda.is_current_stream_capturing():
            return
        import time

        c = self._ctl()
        end = time.monotonic() + self._cfg.timeout_ms / 1000.0 + 2.0
        spins = 0
        while getattr(c, flag) != 1:
            spins += 1
            if spins > 1000:
                if time.monotonic() > end:
                    return  # the GPU wait has the deadline and reports it
                time.sleep(20e-6)

    def _gpu_call(self, rc: int, op: str) -> None:
        if rc:
            raise error_for(rc, op, ml.cuda_error())

    def _cpu_call(self, rc: int, op: str) -> None:
        if rc:
            self.check()
            raise error_for(rc, op)

    # -------------------------------------------------------------- dispatch

    def dispatch(self, x: Any = None, topk_idx: Any = None, topk_weights: Any = None, *,
                 x_scales: Any = None, do_send: bool = True, do_recv: bool = True,
                 handle: Optional[Handle] = None) -> Optional[DispatchResult]:
        """Sends x's tokens to the ranks of their top-k experts, lays them out
        expert-major. x: [n, H] bf16 (quantized here for fp8), or fp8 with
        x_scales [n, H/128] float32; topk_idx: [n, K] int64/int32 (< 0: no
        expert); topk_weights: [n, K] float32, kept for combine. With
        do_recv=False returns the handle's DispatchResult whose tensors are
        filled by the later do_recv call (dispatch(do_send=False, handle=h))."""
        self.check()
        if do_send:
            if handle is not None:
                raise InvalidArgument(22, "a send half takes tokens, not a handle", "xfer.moe.dispatch")
            if self._state not in ("idle", "dispatched"):
                raise InvalidArgument(22, f"dispatch while the previous round is {self._state}: finish "
                                      "its receive (and combine) first", "xfer.moe.dispatch")
            handle = self._dispatch_send(x, topk_idx, topk_weights, x_scales)
        elif handle is None:
            raise InvalidArgument(22, "a receive half needs the handle of its send half", "xfer.moe.dispatch")
        if not do_recv:
            return DispatchResult(self._expert_x, self._expert_scales, self._counts, self._offsets, handle)
        if handle is not self._handle or self._state != "dispatch_sent":
            raise InvalidArgument(22, "this handle's dispatch was already received, or is not the latest",
                                  "xfer.moe.dispatch")
        if self.gpu:
            self._host_prewait("recv_flag")
            self._gpu_call(ml.g.cuda_dispatch_recv(
                self._g, self._expert_x.data_ptr(), ml.ptr(self._expert_scales), self._counts.data_ptr(),
                self._offsets.data_ptr(), self._src_rank.data_ptr(), self._src_token.data_ptr(),
                self._stream()), "xfer_moe_cuda_dispatch_recv")
        else:
            o = ml.ExpertOut(self._expert_x.data_ptr(), ml.ptr(self._expert_scales), self._counts.data_ptr(),
                             self._offsets.data_ptr(), self._src_rank.data_ptr(), self._src_token.data_ptr())
            self._state = "dispatched"  # first: the C half ends its round even when it fails
            self._cpu_call(ml.f.cpu_dispatch_recv(self._m, byref(o)), "xfer_moe_cpu_dispatch_recv")
        self._state = "dispatched"
        handle.received = True
        return DispatchResult(self._expert_x, self._expert_scales, self._counts, self._offsets, handle)

    def dispatch_recv(self, handle: Handle) -> DispatchResult:
        """The receive half of a dispatch (dispatch(do_send=False, handle=handle))."""
        out = self.dispatch(do_send=False, do_recv=True, handle=handle)
        assert out is not None
        return out

    def _dispatch_send(self, x: Any, topk_idx: Any, topk_weights: Any, x_scales: Any) -> Handle:
        torch = self._torch
        H, K, G = self.hidden, self.topk, self.hidden // ml.SCALE_BLOCK
        if x is None or topk_idx is None:
            raise InvalidArgument(22, "dispatch needs x and topk_idx", "xfer.moe.dispatch")
        n = int(x.shape[0]) if getattr(x, "dim", lambda: 0)() == 2 else -1
        if not 0 <= n <= self.max_tokens:
            raise InvalidArgument(22, f"x must be [n, {H}] with n <= max_tokens ({self.max_tokens}); "
                                  f"got {tuple(getattr(x, 'shape', ()))}", "xfer.moe.dispatch")
        want_x = (torch.bfloat16, self.dispatch_dtype) if self.fp8 else (torch.bfloat16,)
        self._tensor(x, "x", (n, H), want_x)
        self._tensor(topk_idx, "topk_idx", (n, K), (torch.int64, torch.int32))
        if topk_weights is not None:
            self._tensor(topk_weights, "topk_weights", (n, K), (torch.float32,))
        quantize = self.fp8 and x.dtype == torch.bfloat16
        if self.fp8 and not quantize:
            if x_scales is None:
                raise InvalidArgument(22, "fp8 tokens need x_scales [n, H/128] float32", "xfer.moe.dispatch")
            self._tensor(x_scales, "x_scales", (n, G), (torch.float32,))
        elif x_scales is not None:
            raise InvalidArgument(22, "x_scales go with fp8 tokens only", "xfer.moe.dispatch")
        ib = topk_idx.element_size()
        if self.gpu:
            self._gpu_call(ml.g.cuda_dispatch_send(self._g, n, x.data_ptr(), ml.ptr(x_scales), int(quantize),
                                                   topk_idx.data_ptr(), ib, self._stream()),
                           "xfer_moe_cuda_dispatch_send")
        else:
            if quantize:
                x, x_scales = quantize_fp8(x)
            t = ml.Tokens(n, x.data_ptr(), ml.ptr(x_scales), topk_idx.data_ptr(), ib)
            self._keep_send = (x, x_scales)
            self._cpu_call(ml.f.cpu_dispatch_send(self._m, byref(t)), "xfer_moe_cpu_dispatch_send")
        self._round += 1
        self._state = "dispatch_sent"
        self._handle = Handle(self, self._round, n, topk_idx, topk_weights)
        return self._handle

    # --------------------------------------------------------------- combine

    def combine(self, expert_out: Any = None, handle: Optional[Handle] = None, *, topk_weights: Any = None,
                do_send: bool = True, do_recv: bool = True, out: Any = None) -> Any:
        """Sends each expert row back to its token's rank, which sums its top-k
        rows weighted (fp32, slot order) into [n, H] bf16. expert_out has
        expert_x's layout in bf16; topk_weights defaults to the dispatch's.
        Returns the output (a view of this object's buffer unless out is
        given), or None for a send half alone."""
        self.check()
        torch = self._torch
        if handle is None or handle is not self._handle or not handle.received:
            raise InvalidArgument(22, "combine needs the handle of the latest dispatch, received",
                                  "xfer.moe.combine")
        if do_send:
            if self._state != "dispatched":
                raise InvalidArgument(22, f"combine send while the round is {self._state}", "xfer.moe.combine")
            self._tensor(expert_out, "expert_out", tuple(self._expert_x.shape), (torch.bfloat16,))
            if self.gpu:
                self._gpu_call(ml.g.cuda_combine_send(self._g, expert_out.data_ptr(), self._stream()),
                               "xfer_moe_cuda_combine_send")
            else:
                self._cpu_call(ml.f.cpu_combine_send(self._m, expert_out.data_ptr()), "xfer_moe_cpu_combine_send")
            self._state = "combine_sent"
            self._keep_comb = expert_out
        if not do_recv:
            return None
        if self._state != "combine_sent":
            raise InvalidArgument(22, "combine receive before its send half", "xfer.moe.combine")
        n = handle.num_tokens
        w = topk_weights if topk_weights is not None else handle.topk_weights
        if w is None:
            raise InvalidArgument(22, "combine needs topk_weights (at dispatch or here)", "xfer.moe.combine")
        self._tensor(w, "topk_weights", (n, self.topk), (torch.float32,))
        dst = self._out[:n] if out is None else self._tensor(out, "out", (n, self.hidden), (torch.bfloat16,))
        if self.gpu:
            self._host_prewait("comb_flag")
            self._gpu_call(ml.g.cuda_combine_recv(self._g, n, w.data_ptr(), dst.data_ptr(), self._stream()),
                           "xfer_moe_cuda_combine_recv")
        else:
            self._state = "idle"  # first: the C half ends its round even when it fails
            self._cpu_call(ml.f.cpu_combine_recv(self._m, w.data_ptr(), dst.data_ptr()),
                           "xfer_moe_cpu_combine_recv")
        self._state = "idle"
        return dst

    # ---------------------------------------------------------------- misc

    def debug_state(self, timeout: float = 2.0) -> str:
        """One line per source of state, for a log when something is stuck:
        the control words the kernels and the proxy share, the module's
        status, and on a GPU the device round and this rank's arena flags
        (read on a stream of their own, so also while a wait spins)."""
        if not self._m:
            return "closed"
        c = self._ctl()
        msg = ctypes.create_string_buffer(512)
        rc = ml.f.status(self._m, msg, 512, None)
        out = [f"rank {self.rank}: python round {self._round} state {self._state}; wait {getattr(self, 'gpu_wait', '-')}"
               f", mps {getattr(self, 'mps', False)}; status {rc} "
               f"{msg.value.decode(errors='replace')!r}; ctl " + " ".join(
                   f"{n}={getattr(c, n)}" for n, _ in ml.Ctl._fields_ if not n.startswith("pad"))]
        pbuf = ctypes.create_string_buffer(2048)
        if ml.f.debug_state(self._m, pbuf, 2048) >= 0:
            out.append(f"rank {self.rank}: " + pbuf.value.decode(errors="replace"))
        if self._g:
            out.append(self._device_debug(timeout))
        return "\n".join(out)

    def kernel_trace(self) -> Optional[List[List[int]]]:
        """Per-kernel GPU stamps of the last rounds (up to 1,024), when the
        object was made with XFER_MOE_TRACE=1 in the environment, else None:
        one list per round, oldest first, [round, start0, end0, start1, ...]
        in ns on the GPU's global timer (one clock for every process of the
        device), the kernels in launch order (ml.TRACE_POINTS), 0 for one
        that did not run. Read on a stream of its own: call it once the
        device is idle."""
        if not self._g:
            return None
        n = 2 * (len(ml.TRACE_POINTS) + 1) * ml.TRACE_ROUNDS
        buf = (ctypes.c_uint64 * n)()
        got = ml.g.cuda_trace(self._g, buf, n)
        if got < 0:
            raise error_for(got, "xfer_moe_cuda_trace", ml.cuda_error())
        if got == 0:
            return None
        per = 2 * (len(ml.TRACE_POINTS) + 1)
        rounds = []
        for i in range(ml.TRACE_ROUNDS):
            row = buf[i * per:(i + 1) * per]
            rnd = row[2 * len(ml.TRACE_POINTS)]
            if rnd:
                rounds.append([rnd] + list(row[:2 * len(ml.TRACE_POINTS)]))
        rounds.sort(key=lambda r: r[0])
        return rounds

    def _device_debug(self, timeout: float) -> str:
        """The device half of debug_state, on a thread of its own: the driver
        can hold a call back (a context synchronization waiting for a
        spinning kernel), and a hung read must not hang the log with it."""
        import threading

        box: List[str] = []
        g = self._g

        def read() -> None:
            buf = ctypes.create_string_buffer(8192)
            n = ml.g.cuda_debug(g, buf, 8192)
            box.append(buf.value.decode(errors="replace") if n >= 0 else f"cuda_debug: {ml.cuda_error()}")

        t = threading.Thread(target=read, name="xfer-moe-debug", daemon=True)
        t.start()
        t.join(timeout)
        if box:
            return box[0]
        return (f"rank {self.rank}: the device state could not be read within {timeout:.0f} s: the CUDA "
                "driver holds this process's calls back (a context synchronization, e.g. a kernel being "
                "loaded lazily or a cudaFree, waiting for a kernel or stream wait that does not finish)")

    def stats(self) -> MoEStats:
        s = ml.Stats()
        ml.f.get_stats(self._m, byref(s))
        return MoEStats(*[getattr(s, n) for n, _ in ml.Stats._fields_])

    def close(self) -> None:
        """Says goodbye to every rank (bounded by the deadline), then frees
        the engine and the buffers. On a GPU, waits for the device first."""
        if self._g and self._torch.cuda.is_available():
            try:
                self._torch.cuda.synchronize(self.device)
            except Exception:  # pragma: no cover - a broken device must not keep memory
                pass
        if self._m:
            ml.f.destroy(self._m)
            self._m = None
        if self._g:
            ml.g.cuda_destroy(self._g)
            self._g = None

    def __enter__(self) -> "MoE":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # pragma: no cover - interpreter teardown
            pass

    def __repr__(self) -> str:
        return (f"<xfer.moe.MoE rank {self.rank}/{self.world_size} {self.num_experts} experts top-{self.topk} "
                f"hidden {self.hidden} on {self.device}, {self.remote_ranks} remote ranks>")


def quantize_fp8(x: Any):
    """x [n, H] bf16 -> (fp8 e4m3 [n, H], float32 scales [n, H/128]): per 128
    channels scale = max(amax, 1e-4) / 448 and q = x / scale, as the GPU
    kernel does (the reference the tests compare with)."""
    torch = _torch()
    n, H = x.shape
    xf = x.float().view(n, H // ml.SCALE_BLOCK, ml.SCALE_BLOCK)
    scale = xf.abs().amax(dim=-1).clamp(min=1e-4) / 448.0
    q = (xf / scale.unsqueeze(-1)).view(n, H).to(torch.float8_e4m3fn)
    return q.contiguous(), scale.contiguous()
