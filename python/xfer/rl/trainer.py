"""The trainer side: ``Trainer.update(step)`` runs this rank's part of the schedule.

Per mesh group, tasks run in schedule order on the calling thread while the
engine's worker moves the bytes: a gather (the collective the application
supplies), a copy (a WRITE straight from the registered shard: zero-copy),
or a prep (fuse the band's pieces, quantize or convert into staging memory,
then WRITE it). Preparation of one task overlaps the WRITEs of the previous
ones; the staging pool is the memory watermark: a task that does not fit
waits for the oldest WRITEs to complete. Between mesh groups the trainers
pass an xfer barrier; at the end they exchange a status message, so that
every trainer raises the same :class:`UpdateError` naming the inference
ranks that failed, even those that wrote nothing to them.

Host-resident shards (CPU-offloaded FSDP) with a CUDA ``device`` are copied
to the GPU (the H2D stage) before a gather or prep reads them; copies are
written from host memory directly.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence, Tuple

import numpy as np

import xfer

from . import fp8, wire
from .layout import FP8, LayoutError, Sharded, esize
from .pool import Pool
from .schedule import Schedule, copy_is_contiguous

Endpoint = Tuple[bytes, Sequence[bytes]]  # an inference rank's address and region descriptors (one per buffer)


def local_boxes(descriptions: Sequence[Any], rank: int) -> Dict[str, Tuple[Tuple[int, int], Tuple[int, int]]]:
    """This rank's box of every parameter it holds, from the descriptions it
    gave the controller (Shard or Sharded entries)."""
    out = {}
    for d in descriptions:
        shards = d.shards() if isinstance(d, Sharded) else [d]
        for s in shards:
            if s.rank == rank:
                out[s.name] = (s.rows, s.cols)
    return out


class _Flight:
    """The WRITEs of one task and the staging they hold."""

    __slots__ = ("ops", "allocs", "on_done")

    def __init__(self) -> None:
        self.ops: List[Tuple[Any, int]] = []  # (Completion, inference rank)
        self.allocs: List[int] = []
        self.on_done: List[Callable[[], None]] = []


class Trainer:
    """One trainer rank.

    ``params`` maps parameter names to this rank's local shard tensors (torch,
    contiguous, registered once here: keep them in place between updates),
    ``boxes`` gives their boxes (:func:`local_boxes`). ``gather`` is the
    collective for gather tasks (:class:`xfer.rl.gather.TorchGather`).
    ``pool_bytes`` is the staging watermark, on ``device`` (default: where the
    parameters are). ``gate``: wait for each inference rank's grant before
    writing into it. Engine keywords (``provider``, ``nics``, ...) go to
    :class:`xfer.Engine`.
    """

    def __init__(self, schedule: Schedule, rank: int, params: Dict[str, Any],
                 boxes: Dict[str, Tuple[Tuple[int, int], Tuple[int, int]]], *,
                 gather: Optional[Callable[..., None]] = None, device: Any = None, pool_bytes: int = 64 << 20,
                 gate: bool = True, heartbeat_ms: int = 200, heartbeat_misses: int = 10,
                 on_task: Optional[Callable[[int, List[Any]], None]] = None, **engine_kw: Any):
        import torch

        self.torch = torch
        if schedule.sliced_for not in (None, rank):
            raise ValueError(f"trainer {rank}: the schedule is the slice of trainer {schedule.sliced_for}")
        self.s = schedule
        self.rank = rank
        self.gather = gather
        self.gate = gate
        self.on_task = on_task
        self.params = params
        self.boxes = boxes
        first = next(iter(params.values()), None)
        dev = torch.device(device) if device is not None else (first.device if first is not None else torch.device("cpu"))
        if dev.type == "cuda" and dev.index is None:  # "cuda" and "cuda:N" must compare equal to tensors' devices
            dev = torch.device("cuda", torch.cuda.current_device())
        self.device = dev
        self.eng = xfer.Engine(heartbeat_ms=heartbeat_ms, heartbeat_misses=heartbeat_misses,
                               on_recv=self._on_msg, **engine_kw)
        self.regions: Dict[str, Any] = {}
        for name, t in params.items():
            if name not in boxes:
                raise LayoutError(f"trainer {rank}: no box for {name}")
            (r0, r1), (c0, c1) = boxes[name]
            if t.numel() != (r1 - r0) * (c1 - c0) or not t.is_contiguous():
                raise LayoutError(f"trainer {rank}: {name} has {t.numel()} elements (contiguous: {t.is_contiguous()}), "
                                  f"its box {r1 - r0}x{c1 - c0}")
            if t.numel():
                self.regions[name] = self.eng.register(t)
        self.pool = Pool(pool_bytes)
        self.pool_mem = torch.empty(self.pool.capacity, dtype=torch.uint8, device=self.device)
        self.pool_region = self.eng.register(self.pool_mem)
        self._msgs: Dict[int, Dict[int, Dict[str, str]]] = {}
        self._cv = threading.Condition()
        self._index_cache: Dict[int, Any] = {}
        self.trainer_peers: List[Any] = []
        self.group = None
        self.inf_peers: List[Any] = []
        self.remote: List[List[Any]] = []

    @property
    def address(self) -> bytes:
        return self.eng.address

    # ------------------------------------------------------------ wiring
    def connect(self, trainers: Sequence[bytes], inference: Sequence[Endpoint]) -> None:
        """Peers: every trainer (this one included, for the barriers) and every
        inference rank with its imported regions."""
        if len(trainers) != self.s.trainers or len(inference) != self.s.ranks:
            raise ValueError(f"connect: {len(trainers)} trainers and {len(inference)} inference ranks, "
                             f"the schedule has {self.s.trainers} and {self.s.ranks}")
        self.trainer_peers = [self.eng.add_peer(a) for a in trainers]
        self.group = self.eng.group(self.trainer_peers)
        self.inf_peers = [None] * self.s.ranks
        self.remote = [[] for _ in range(self.s.ranks)]
        for j, ep in enumerate(inference):
            self._attach(j, ep)

    def _attach(self, j: int, ep: Endpoint) -> None:
        addr, descs = ep
        p = self.eng.add_peer(addr)
        self.inf_peers[j] = p
        self.remote[j] = [self.eng.import_region(p, d) for d in descs]
        for rr in self.remote[j]:
            if len(rr) < self.s.region_bytes[j]:
                raise LayoutError(f"inference rank {j}: region of {len(rr)} bytes, the schedule writes {self.s.region_bytes[j]}")

    def replace_rank(self, j: int, endpoint: Endpoint, schedule: Any) -> None:
        """Inference rank ``j`` was replaced: its new address and regions, and
        the patched schedule (a :class:`Schedule` or its bytes)."""
        s = schedule if isinstance(schedule, Schedule) else Schedule.from_bytes(schedule)
        if (s.trainers, s.ranks) != (self.s.trainers, self.s.ranks) or s.epoch <= self.s.epoch:
            raise ValueError("replace_rank: the patched schedule does not follow the current one")
        if s.sliced_for not in (None, self.rank):
            raise ValueError(f"replace_rank: trainer {self.rank} got the slice of trainer {s.sliced_for}")
        for rr in self.remote[j]:
            rr.close()
        old = self.inf_peers[j]
        if old is not None:
            old.remove()
        self.s = s
        self._attach(j, endpoint)

    # ------------------------------------------------------------ messages
    def _on_msg(self, m: Any) -> None:
        try:
            v = wire.parse_status(m.data)
        except ValueError:
            return
        with self._cv:
            self._msgs.setdefault(v["step"], {})[v["rank"]] = v["failed"]
            self._cv.notify_all()

    # ------------------------------------------------------------ the update
    def update(self, step: int, timeout: float = 60.0) -> Dict[str, float]:
        """Writes this step's weights. Returns seconds spent per stage; raises
        :class:`UpdateError` (on every trainer alike) if any rank failed."""
        run = _Run(self, step, time.monotonic() + timeout)
        return run.execute()

    def close(self) -> None:
        self.eng.close()

    def __enter__(self) -> "Trainer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class _Run:
    """One update of one trainer rank."""

    def __init__(self, tr: Trainer, step: int, deadline: float):
        self.tr, self.s, self.step, self.deadline = tr, tr.s, step, deadline
        self.torch = tr.torch
        self.failed: Dict[str, str] = {}
        self.flights: Deque[_Flight] = deque()
        self.full: Dict[str, Tuple[int, Any]] = {}  # gathered param -> (pool offset, 2-D tensor)
        self.uses: Dict[str, int] = {}
        self.t = {"gate": 0.0, "h2d": 0.0, "gather": 0.0, "fuse": 0.0, "quantize": 0.0, "submit": 0.0,
                  "wait": 0.0, "barrier": 0.0, "total": 0.0}
        self.imm = wire.imm(wire.DATA, step, tr.rank)
        self.buf = step % max(1, len(tr.remote[0]) if tr.remote else 1)

    # -- helpers
    def ms_left(self) -> int:
        return max(1, int((self.deadline - time.monotonic()) * 1000))

    def fail(self, j: int, why: str) -> None:
        self.failed.setdefault(f"inference {j}", why)

    def local2d(self, name: str, allocs: List[int]):
        """This rank's shard of ``name`` as a 2-D tensor on the preparation
        device: an offloaded shard is copied into staging (H2D), freed by the
        caller with ``allocs``."""
        (r0, r1), (c0, c1) = self.tr.boxes[name]
        t = self.tr.params[name].view(r1 - r0, c1 - c0)
        if t.device == self.tr.device or t.numel() == 0:
            return t
        t0 = time.perf_counter()
        off = self.alloc(t.numel() * t.element_size())
        allocs.append(off)
        d = self.tr.pool_mem[off:off + t.numel() * t.element_size()].view(t.dtype).view(t.shape)
        d.copy_(t, non_blocking=True)
        self.t["h2d"] += time.perf_counter() - t0
        return d

    def view(self, off: int, shape: Tuple[int, int], dtype: str):
        n = shape[0] * shape[1] * esize(dtype)
        return self.tr.pool_mem[off:off + n].view(fp8.torch_dtype(dtype)).view(shape)

    def alloc(self, nbytes: int) -> int:
        while True:
            off = self.tr.pool.alloc(nbytes)
            if off is not None:
                return off
            if not self.flights:
                raise MemoryError("staging pool exhausted with nothing in flight")
            self.retire(block=True)

    def retire(self, block: bool) -> None:
        """Completes the oldest flights (waiting for the first if ``block``).
        Every WRITE has the update's deadline, so the engine completes it by
        then; staging is reused only once nothing reads it any more."""
        while self.flights:
            f = self.flights[0]
            pending = [c for c, _ in f.ops if not c.done()]
            if pending:
                if not block:
                    return
                t0 = time.perf_counter()
                try:
                    xfer.wait(pending, timeout=max(0.001, self.deadline - time.monotonic()) + 5)
                except Exception:
                    pass
                self.t["wait"] += time.perf_counter() - t0
                block = False
            self.flights.popleft()
            stuck = False
            for c, j in f.ops:
                if not c.done():
                    stuck = True
                    self.fail(j, "a WRITE outlived its deadline")
                    continue
                e = c.exception(0)
                if e is not None:
                    self.fail(j, f"{type(e).__name__}: {e}")
            if not stuck:  # else leak the staging rather than overwrite bytes in flight
                for off in f.allocs:
                    self.tr.pool.free(off)
            for fn in f.on_done:
                fn()

    def submit(self, flight: _Flight, j: int, fn: Callable[[], Any]) -> None:
        if f"inference {j}" in self.failed:
            return
        t0 = time.perf_counter()
        while True:
            try:
                flight.ops.append((fn(), j))
                break
            except xfer.WouldBlock:
                self.retire(block=True)
            except xfer.Error as e:  # a dead peer refuses at once: note it, go on with the others
                self.fail(j, f"{type(e).__name__}: {e}")
                break
        self.t["submit"] += time.perf_counter() - t0

    def pages(self, n: int):
        a = self.tr._index_cache.get(n)
        if a is None:
            a = self.tr._index_cache[n] = np.arange(n, dtype=np.uint32)
        return a

    # -- stages
    def wait_grants(self) -> None:
        """Each inference rank's grant for this step; a rank that is dead or
        silent until the deadline is failed (its writes skipped)."""
        t0 = time.perf_counter()
        tr, eng = self.tr, self.tr.eng
        grants = {}
        for j in range(self.s.ranks):
            try:
                grants[j] = eng.expect_imm(wire.imm(wire.GRANT, self.step, j), 1, timeout_ms=self.ms_left())
            except xfer.Error as e:
                self.fail(j, f"grant: {e}")
        while grants:
            for j, c in list(grants.items()):
                if c.done():
                    e = c.exception(0)
                    if e is not None:
                        self.fail(j, f"no grant for step {self.step}: {type(e).__name__}")
                    del grants[j]
                elif tr.inf_peers[j].state != "live" or time.monotonic() > self.deadline:
                    self.fail(j, f"no grant for step {self.step}: peer {tr.inf_peers[j].state}")
                    try:
                        eng.imm_disarm(wire.imm(wire.GRANT, self.step, j))
                    except xfer.Error:
                        pass
                    del grants[j]
            if grants:
                time.sleep(0.002)
        self.t["gate"] += time.perf_counter() - t0

    def do_gather(self, task: List[Any]) -> None:
        _, _, name, mesh, root = task
        tr = self.tr
        if tr.gather is None:
            raise LayoutError("the schedule has gathers but the trainer has no gather function")
        rows, cols, dt = self.s.params[name]
        members = self.s.meshes[mesh]
        boxes = [(r,) + self.s.box(name, mesh, r) for r in members]
        out = None
        if root in (-1, tr.rank):
            off = self.alloc(rows * cols * esize(dt))
            out = self.view(off, (rows, cols), dt)
            self.full[name] = (off, out)
        tmp: List[int] = []
        local = self.local2d(name, tmp) if name in tr.params else tr.torch.empty(0, 0, dtype=fp8.torch_dtype(dt))
        t0 = time.perf_counter()
        tr.gather(name, mesh, root, local, boxes, out)
        self.t["gather"] += time.perf_counter() - t0
        for off in tmp:
            tr.pool.free(off)
        if out is not None and self.uses.get(name, 0) == 0:  # all-gathered, used by other members only
            tr.pool.free(self.full.pop(name)[0])

    def release_full(self, name: str) -> None:
        self.uses[name] -= 1
        if self.uses[name] == 0 and name in self.full:
            off, _ = self.full.pop(name)
            self.tr.pool.free(off)

    def do_copy(self, task: List[Any]) -> None:
        _, _, name, full, so, ss, rows, rb, dests = task
        tr = self.tr
        f = _Flight()
        if full:
            base, _ = self.full[name]
            src, so = tr.pool_region, so + base
            self.sync()
            f.on_done.append(lambda n=name: self.release_full(n))
        else:
            src = tr.regions[name]
        for j, off, ds in dests:
            dst = tr.remote[j][self.buf]
            if copy_is_contiguous(rows, rb, ss, ds):
                self.submit(f, j, lambda dst=dst, off=off: tr.eng.write(
                    src, dst, rows * rb, src_offset=so, dst_offset=off, imm=self.imm, timeout_ms=self.ms_left()))
            else:
                idx = self.pages(rows)
                self.submit(f, j, lambda dst=dst, off=off: tr.eng.write_paged(
                    src, dst, idx, idx, rb, src_stride=ss, dst_stride=ds, src_base=so, dst_base=off,
                    imm=self.imm, timeout_ms=self.ms_left()))
        self.flights.append(f)

    def do_prep(self, task: List[Any]) -> None:
        _, _, ci, r0, r1, dests = task
        tr = self.tr
        ct = self.s.contents[ci]
        h, W = r1 - r0, ct.shape[1]
        src_dtypes = {self.s.params[p.source][2] for p in ct.pieces}
        work_dt = next(iter(src_dtypes)) if len(src_dtypes) == 1 else "float32"
        t0 = time.perf_counter()
        tmp_off = self.alloc(h * W * esize(work_dt))
        tmp = self.view(tmp_off, (h, W), work_dt)
        used, h2d = [], []
        for pc in ct.pieces:  # fusion: each piece's rows of this band at its place
            a, b = max(r0, pc.at[0]), min(r1, pc.at[0] + pc.height)
            if a >= b:
                continue
            sr = pc.rows[0] + a - pc.at[0]
            if pc.source in self.full:
                src = self.full[pc.source][1]
                used.append(pc.source)
                block = src[sr:sr + b - a, pc.cols[0]:pc.cols[1]]
            else:
                (br, _), (bc, _) = tr.boxes[pc.source]
                src = self.local2d(pc.source, h2d)
                block = src[sr - br:sr - br + b - a, pc.cols[0] - bc:pc.cols[1] - bc]
            tmp[a - r0:b - r0, pc.at[1]:pc.at[1] + pc.width].copy_(block)
        t1 = time.perf_counter()
        self.t["fuse"] += t1 - t0
        out_n = h * W * esize(ct.dtype)
        f = _Flight()
        if ct.fp8:
            nrb, ncb = -(-h // ct.block), -(-W // ct.block)
            off = self.alloc(out_n + 256 + nrb * ncb * 4)
            soff = off + (out_n + 255) // 256 * 256
            q = self.view(off, (h, W), FP8)
            sc = self.view(soff, (nrb, ncb), "float32")
            fp8.quantize(tmp, ct.block, out=q, scales_out=sc)
        else:
            off = self.alloc(out_n)
            self.view(off, (h, W), ct.dtype).copy_(tmp)
        tr.pool.free(tmp_off)
        for o in h2d:
            tr.pool.free(o)
        for name in used:
            self.release_full(name)
        self.sync()
        self.t["quantize"] += time.perf_counter() - t1
        f.allocs.append(off)
        for j, doff, dsoff in dests:
            dst = tr.remote[j][self.buf]
            self.submit(f, j, lambda dst=dst, doff=doff: tr.eng.write(
                tr.pool_region, dst, out_n, src_offset=off, dst_offset=doff, imm=self.imm, timeout_ms=self.ms_left()))
            if ct.fp8:
                self.submit(f, j, lambda dst=dst, dsoff=dsoff: tr.eng.write(
                    tr.pool_region, dst, nrb * ncb * 4, src_offset=soff, dst_offset=dsoff, imm=self.imm,
                    timeout_ms=self.ms_left()))
        self.flights.append(f)

    def sync(self) -> None:
        """GPU work that produced staging bytes is done before a WRITE reads them."""
        if self.tr.device.type == "cuda":
            self.torch.cuda.current_stream(self.tr.device).synchronize()

    def barrier(self, gi: int) -> None:
        t0 = time.perf_counter()
        tr = self.tr
        i = wire.imm(wire.GROUP, self.step, gi)
        try:
            c = tr.eng.expect_imm(i, len(tr.group), timeout_ms=self.ms_left())
            tr.eng.barrier(tr.group, i, timeout_ms=self.ms_left())
            c.result(timeout=max(0.001, self.deadline - time.monotonic()) + 1)
        except Exception as e:  # a trainer missing: the status exchange names it
            self.failed.setdefault("barrier", f"group {gi}: {type(e).__name__}: {e}")
        self.t["barrier"] += time.perf_counter() - t0

    def exchange(self) -> None:
        """The final barrier: every trainer's failures to every trainer."""
        t0 = time.perf_counter()
        tr = self.tr
        msg = wire.status(self.step, tr.rank, self.s.epoch, self.failed)
        for t, p in enumerate(tr.trainer_peers):
            if t != tr.rank:
                try:
                    tr.eng.send(p, msg, timeout_ms=self.ms_left())
                except xfer.Error as e:
                    self.failed.setdefault(f"trainer {t}", f"status: {e}")
        with tr._cv:
            while True:
                got = tr._msgs.get(self.step, {})
                if len(got) >= self.s.trainers - 1:
                    break
                left = self.deadline - time.monotonic()
                if left <= 0:
                    for t in range(self.s.trainers):
                        if t != tr.rank and t not in got:
                            self.failed.setdefault(f"trainer {t}", "no status before the deadline")
                    break
                tr._cv.wait(min(left, 0.5))
            for t, f in tr._msgs.pop(self.step, {}).items():
                for k, v in f.items():
                    self.failed.setdefault(k, f"{v} (seen by trainer {t})")
            for old in [k for k in tr._msgs if k < self.step]:
                tr._msgs.pop(old, None)
        self.t["barrier"] += time.perf_counter() - t0

    def execute(self) -> Dict[str, float]:
        t_start = time.perf_counter()
        try:
            self.run_tasks()
        except Exception as e:  # still drain and report, so that no other trainer waits for us
            self.failed[f"trainer {self.tr.rank}"] = f"{type(e).__name__}: {e}"
        self.retire(block=True)
        while self.flights:
            self.retire(block=True)
        for off, _ in self.full.values():
            self.tr.pool.free(off)
        self.full.clear()
        self.exchange()
        self.t["total"] = time.perf_counter() - t_start
        if self.failed:
            raise wire.UpdateError(self.step, self.failed, f"trainer {self.tr.rank}")
        return self.t

    def run_tasks(self) -> None:
        s, tr = self.s, self.tr
        if tr.gate:
            self.wait_grants()
        for gi in range(len(s.groups)):
            prog = s.program(tr.rank, gi)
            for task in prog:  # reference counts of gathered tensors on this rank
                if task[0] == "copy" and task[3]:
                    self.uses[task[2]] = self.uses.get(task[2], 0) + 1
                elif task[0] == "prep":
                    for src in {p.source for p in s.contents[task[2]].pieces}:
                        self.uses[src] = self.uses.get(src, 0) + 1
            for task in prog:
                if tr.on_task is not None:
                    tr.on_task(self.step, task)
                if task[0] == "gather":
                    self.do_gather(task)
                elif task[0] == "copy":
                    self.do_copy(task)
                else:
                    self.do_prep(task)
                self.retire(block=False)
            for name in [n for n, k in self.uses.items() if k <= 0 and n in self.full]:
                self.tr.pool.free(self.full.pop(name)[0])  # gathered here for others only
            if gi + 1 < len(s.groups):
                self.barrier(gi)
