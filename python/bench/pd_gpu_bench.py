#!/usr/bin/env python3
"""P/D disaggregation on two GPUs: does the KV transfer hide behind the prefill?

A prefill process on cuda:0 computes a real transformer layer by layer
(pd_gpu_model.py: one TP4 rank of Qwen3-235B-A22B, random bf16 weights) and
writes each layer's K and V into its KV pool's pages; a decode process (this
one) on cuda:1 owns a GPU KV pool that xfer.kv fills. For every prompt length
and transport, the same request is asked for three ways (as pd_bench.c does):

  colocated      the prefill computes every layer, nothing is transferred
                 while it runs: its compute time is the colocated TTFT
  disaggregated  each layer is handed to xfer as soon as the GPU has finished
                 it (a CUDA event per layer, waited for by a notifier thread,
                 so the compute stream never stalls); TTFT = admission at the
                 decoder to the last page and the extra context landed there
  transfer only  no compute, every layer handed over at once; / layers gives
                 the per-layer transfer time

Transports: shm-ipc (shm provider; pages go GPU to GPU through the same-host
CUDA IPC path) and tcp-staged (tcp;ofi_rxm over lo with XFER_GPU_IPC=0:
GPU -> pinned host mirror -> tcp -> pinned host mirror -> GPU). Every page is
verified: after each request the prefiller sends, out of band, a
position-weighted checksum per layer of its pages (computed on its GPU once
nothing is in flight) and a digest of the extra context; the decoder computes
the same over the pages it received, on its GPU. The checksums travel out of
band so that computing them never delays the final write being timed.

    python3 python/bench/pd_gpu_bench.py [--seqs 4096,...] [--layers 16] [--json FILE]
    python3 python/bench/pd_gpu_bench.py --device cpu     # small end-to-end check on CPU tensors

Exits 77 (skipped) without torch, without two GPUs, or when libxfer cannot
use CUDA; 1 on any failure or mismatch.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import queue
import statistics
import struct
import sys
import threading
import time
import traceback
from collections import deque
from typing import Any, Dict, List, Optional, Tuple

COLOC, DISAGG, XFER = 1, 2, 3
MODE_NAMES = {COLOC: "colocated", DISAGG: "disaggregated", XFER: "transfer only"}
APP = struct.Struct("<II")  # mode, tokens the prefill computes
CTX_HDR = struct.Struct("<Q")  # compute ns; the last position's hidden state follows

# name -> (provider, XFER_GPU_IPC, description)
TRANSPORTS = {
    "shm-ipc": ("shm", "1", "shm provider, GPU to GPU through the same-host CUDA IPC path"),
    "tcp-staged": ("tcp", "0", "tcp;ofi_rxm over lo, staged through pinned host mirrors (XFER_GPU_IPC=0)"),
    "tcp-ipc": ("tcp", "1", "tcp;ofi_rxm over lo for messages, pages through the CUDA IPC path"),
    "shm-staged": ("shm", "0", "shm provider, staged through pinned host mirrors (XFER_GPU_IPC=0)"),
    "shm": ("shm", "1", "shm provider, host memory"),
    "tcp": ("tcp", "1", "tcp;ofi_rxm over lo, host memory"),
}

GPU_DEFAULTS = dict(seqs="4096,8192,16384,32768,65536,131072", layers=16, hidden=4096, q_heads=16,
                    kv_heads=1, head_dim=128, ffn=3072, page_tokens=64, reps=3, long_reps=2,
                    long_from=65536, transports="shm-ipc,tcp-staged", budget_s=150.0)
CPU_DEFAULTS = dict(seqs="256,512", layers=4, hidden=256, q_heads=4, kv_heads=1, head_dim=32, ffn=512,
                    page_tokens=16, reps=1, long_reps=1, long_from=1 << 30, transports="shm,tcp",
                    budget_s=120.0)


def skip(why: str) -> int:
    print(f"pd_gpu_bench: SKIP: {why}", file=sys.stderr)
    return 77


def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                   help="cuda: prefill on cuda:0, decode on cuda:1; cpu: both on CPU tensors (a small check)")
    p.add_argument("--seqs", help="prompt lengths, comma-separated (multiples of --page-tokens)")
    p.add_argument("--layers", type=int, help="layers computed and transferred (the model has 94)")
    p.add_argument("--hidden", type=int)
    p.add_argument("--q-heads", type=int)
    p.add_argument("--kv-heads", type=int)
    p.add_argument("--head-dim", type=int)
    p.add_argument("--ffn", type=int, help="dense MLP width per rank (FLOPs of the active experts)")
    p.add_argument("--page-tokens", type=int)
    p.add_argument("--reps", type=int, help="repetitions per prompt length (median)")
    p.add_argument("--long-reps", type=int, help="repetitions from --long-from tokens on")
    p.add_argument("--long-from", type=int)
    p.add_argument("--transports", help=f"comma-separated, of: {', '.join(TRANSPORTS)}")
    p.add_argument("--budget-s", type=float,
                   help="start no further prompt length once its estimated time would end past this many "
                        "seconds after start (what was skipped is printed)")
    p.add_argument("--timeout-s", type=float, default=120.0, help="one request's limit")
    p.add_argument("--gpu-wait", choices=("poll", "block", "copy"), default="poll",
                   help="how the prefill waits for the GPU: poll CUDA events (default), block in "
                        "cudaEventSynchronize, or (end of prefill only) block in the synchronous "
                        "device-to-host copy of the last hidden state")
    p.add_argument("--json", help="write every sample and the tables' figures here")
    a = p.parse_args(argv)
    for k, v in (GPU_DEFAULTS if a.device == "cuda" else CPU_DEFAULTS).items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    a.seqs = [int(s) for s in str(a.seqs).split(",") if s]
    a.transports = [t for t in str(a.transports).split(",") if t]
    for t in a.transports:
        if t not in TRANSPORTS:
            p.error(f"unknown transport {t!r}; known: {', '.join(TRANSPORTS)}")
    if not a.seqs or any(s <= 0 or s % a.page_tokens for s in a.seqs):
        p.error(f"--seqs must be positive multiples of --page-tokens ({a.page_tokens})")
    if a.q_heads % a.kv_heads or min(a.layers, a.reps, a.long_reps) < 1:
        p.error("q heads must be a multiple of kv heads; layers and reps at least 1")
    return a


def layout_of(a: argparse.Namespace):
    from xfer import kv

    # One rank's share as its own model: its KV head(s), unsharded, so that
    # one prefill rank serves one decode rank.
    return kv.Layout(kind=kv.GQA, layers=a.layers, pages=max(a.seqs) // a.page_tokens,
                     page_tokens=a.page_tokens, kv_heads=a.kv_heads, head_dim=a.head_dim, dtype_bytes=2,
                     fused=0, tp_size=1, tp_rank=0)


def shape_of(a: argparse.Namespace):
    from pd_gpu_model import Shape

    return Shape(a.layers, a.hidden, a.q_heads, a.kv_heads, a.head_dim, a.ffn)


def engine_kw(provider: str) -> Dict[str, Any]:
    return {"provider": provider, "nics": "lo" if provider == "tcp" else None}


def digest(b: bytes) -> str:
    return hashlib.blake2b(b, digest_size=16).hexdigest()


# ---------------------------------------------------------------- prefill


class Notifier:
    """Tells the prefiller each layer is done once the GPU has finished it:
    the compute stream keeps going while this thread waits on the events."""

    def __init__(self, wait) -> None:
        self.wait_gpu = wait
        self.q: "queue.Queue[Any]" = queue.Queue()
        self.error: Optional[BaseException] = None
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            item = self.q.get()
            try:
                pf, rid, layers, ev = item
                self.wait_gpu(ev)
                pf.layers_done(rid, layers)
            except BaseException as ex:  # noqa: BLE001 - handed to the compute thread
                self.error = ex
            finally:
                self.q.task_done()

    def wait(self) -> None:
        self.q.join()
        if self.error is not None:
            ex, self.error = self.error, None
            raise ex


def prefill_main(conn, cfg: Dict[str, Any]) -> None:
    try:
        _prefill(conn, argparse.Namespace(**cfg))
    except BaseException:  # noqa: BLE001 - the decoder reports it
        conn.send(("error", traceback.format_exc()))


def _prefill(conn, a: argparse.Namespace) -> None:
    import torch

    from pd_gpu_model import Model, PagedKV
    from xfer import kv

    gpu = a.device == "cuda"
    # The notifier thread needs the GIL for a moment after each layer: do not
    # let it wait the default 5 ms behind the thread launching kernels.
    sys.setswitchinterval(0.0002)
    if gpu:
        torch.cuda.set_device(0)
        device = torch.device("cuda", 0)
    else:
        torch.set_num_threads(1)  # the decoder, and the engines' workers, share the cores
        device = torch.device("cpu")
    t0 = time.perf_counter()
    lay = layout_of(a)
    model = Model(shape_of(a), max(a.seqs), device)
    pool = torch.zeros(lay.nbytes // 2, dtype=torch.bfloat16, device=device)
    paged = PagedKV(pool, a.layers, lay.pages, a.kv_heads, a.page_tokens, a.head_dim)
    # A scattered page order, as a pool in use has.
    perm = torch.randperm(lay.pages, generator=torch.Generator().manual_seed(1))
    pages, write = perm.tolist(), paged.writer(perm.to(device))
    for n in sorted(set(a.seqs)):  # kernel choices and allocator blocks for every length, untimed
        model.layer(0, model.embed[:n], write)
    if gpu:
        torch.cuda.synchronize()
    info = {"device": torch.cuda.get_device_name(0) if gpu else "cpu", "attention": model.attn.path,
            "setup_s": time.perf_counter() - t0, "pool_bytes": lay.nbytes}
    conn.send(("ready", info))

    events: "queue.Queue[Tuple[str, Any]]" = queue.Queue()
    pfs: Dict[str, Any] = {}
    stop = threading.Event()
    def wait_gpu(ev) -> None:
        # A thread blocked in a synchronous CUDA call can hold up other
        # threads' driver calls (the engine worker's copies); "poll" keeps
        # the prefill's own waits out of the driver.
        if a.gpu_wait in ("block", "copy"):
            ev.synchronize()
            return
        while not ev.query():
            time.sleep(0.0001)

    notifier = Notifier(wait_gpu) if gpu else None
    last_hidden = bytes(2 * a.hidden)

    def poller(name: str, pf) -> None:
        while not stop.is_set():
            for ev in pf.poll(16, timeout_ms=100):
                events.put((name, ev))

    def compute(pf, rid: int, tokens: int) -> Tuple[int, bytes]:
        after = None
        if pf is not None and gpu:
            def after(i: int) -> None:
                ev = torch.cuda.Event()
                ev.record()
                notifier.q.put((pf, rid, i + 1, ev))
        elif pf is not None:
            def after(i: int) -> None:
                pf.layers_done(rid, i + 1)  # CPU ops are done when they return
        if gpu:
            torch.cuda.synchronize()
        start = time.perf_counter_ns()
        h = model.prefill(tokens, write, after)
        if gpu and a.gpu_wait != "copy":
            done = torch.cuda.Event()
            done.record()
            wait_gpu(done)
        hidden = h.contiguous().view(torch.int16).cpu().numpy().tobytes()  # waits for the GPU
        took = time.perf_counter_ns() - start
        if notifier is not None:
            notifier.wait()
        return took, hidden

    def serve(name: str, ev) -> None:
        nonlocal last_hidden
        pf = pfs[name]
        mode, tokens = APP.unpack(ev.app)
        status: Any = 0
        try:
            pf.bind(ev.id, pages[: ev.npages])
            if mode == XFER:
                pf.layers_done(ev.id, a.layers)
                took, hidden = 0, last_hidden
            else:
                took, hidden = compute(pf if mode == DISAGG else None, ev.id, tokens)
                last_hidden = hidden
            pf.finish(ev.id, CTX_HDR.pack(took) + hidden)
            deadline = time.monotonic() + a.timeout_s
            while True:
                name2, e = events.get(timeout=max(0.1, deadline - time.monotonic()))
                if name2 == name and e.type == kv.PF_DONE and e.id == ev.id:
                    status = e.status
                    break
            sums = paged.sums(pages[: ev.npages])
        except BaseException:  # noqa: BLE001 - the decoder reports it
            conn.send(("sums", ev.id, None, None, traceback.format_exc()))
            return
        conn.send(("sums", ev.id, sums, digest(hidden), status))

    threads = []
    while True:
        try:
            name, ev = events.get(timeout=0.05)
        except queue.Empty:
            if not conn.poll():
                continue
            msg = conn.recv()
            if msg[0] == "start":
                addrs = {}
                for tname in msg[1]:
                    provider, ipc, _ = TRANSPORTS[tname]
                    os.environ["XFER_GPU_IPC"] = ipc  # read when the engine is created
                    pfs[tname] = kv.Prefiller(lay, pool, ctx_bytes=CTX_HDR.size + 2 * a.hidden, max_jobs=4,
                                              job_timeout_ms=int(a.timeout_s * 1000), **engine_kw(provider))
                    addrs[tname] = (pfs[tname].address, pfs[tname].provider)
                    t = threading.Thread(target=poller, args=(tname, pfs[tname]), daemon=True)
                    t.start()
                    threads.append(t)
                conn.send(("addrs", addrs))
            elif msg[0] == "quit":
                break
            continue
        if ev.type == kv.PF_NEW:
            serve(name, ev)
    stop.set()
    for t in threads:
        t.join()
    for pf in pfs.values():
        pf.close()
    conn.send(("bye",))


# ----------------------------------------------------------------- decode


class Decode:
    """This process's side: decoders (one per transport) on one GPU pool."""

    def __init__(self, a: argparse.Namespace, conn, torch) -> None:
        from pd_gpu_model import PagedKV

        self.a, self.conn, self.torch = a, conn, torch
        self.gpu = a.device == "cuda"
        if self.gpu:
            torch.cuda.set_device(1)
            device = torch.device("cuda", 1)
        else:
            torch.set_num_threads(1)
            device = torch.device("cpu")
        self.lay = layout_of(a)
        self.pool = torch.zeros(self.lay.nbytes // 2, dtype=torch.bfloat16, device=device)
        self.paged = PagedKV(self.pool, a.layers, self.lay.pages, a.kv_heads, a.page_tokens, a.head_dim)
        self.decs: Dict[str, Any] = {}
        self.groups: Dict[str, int] = {}
        self.providers: Dict[str, str] = {}
        self.next_id = 1
        self.verified = 0
        self.mismatches: List[str] = []
        self.pending: "deque[Tuple]" = deque()  # messages read early, while waiting for an event

    def _read(self) -> Tuple:
        msg = self.conn.recv()
        if msg[0] == "error" or (msg[0] == "sums" and msg[2] is None):
            raise RuntimeError("the prefill process failed:\n" + str(msg[-1]))
        return msg

    def recv(self, what: str, timeout: float) -> Tuple:
        if self.pending:
            return self.pending.popleft()
        if not self.conn.poll(timeout):
            raise RuntimeError(f"no {what} from the prefill process within {timeout:.0f} s")
        return self._read()

    def wait_event(self, d, rid: int):
        """The decoder's event for rid; a failure on the prefill side ends the
        wait at once instead of at the request's deadline."""
        deadline = time.monotonic() + self.a.timeout_s + 5
        while time.monotonic() < deadline:
            evs = d.poll(1, timeout_ms=200)
            if evs:
                return evs[0]
            if self.conn.poll(0):
                self.pending.append(self._read())
        return None

    def start(self, names: List[str]) -> None:
        from xfer import kv

        self.conn.send(("start", names))
        addrs = self.recv("addresses", 120)[1]
        for name in names:
            provider, ipc, _ = TRANSPORTS[name]
            os.environ["XFER_GPU_IPC"] = ipc
            d = kv.Decoder(self.lay, self.pool, ctx_bytes=CTX_HDR.size + 2 * self.a.hidden, max_requests=4,
                           **engine_kw(provider))
            self.decs[name] = d
            self.groups[name] = d.join([(addrs[name][0], self.lay)])
            self.providers[name] = addrs[name][1]

    def ask(self, name: str, mode: int, tokens: int) -> Tuple[float, float]:
        """One request; (TTFT at the decoder, the prefill's compute), in ms."""
        a, d = self.a, self.decs[name]
        rid = self.next_id
        self.next_id += 1
        # A colocated run transfers only its first page (after the compute,
        # untimed): enough to verify, without paying a whole transfer.
        admit = a.page_tokens if mode == COLOC else tokens
        d.admit(rid, self.groups[name], admit, timeout_ms=int(a.timeout_s * 1000), app=APP.pack(mode, tokens))
        ev = self.wait_event(d, rid)
        if ev is None:
            raise RuntimeError(f"{name}: no event for request {rid} ({tokens} tokens, {MODE_NAMES[mode]})")
        if ev.status != 0:
            raise RuntimeError(f"{name}: request {rid} failed with status {ev.status}")
        (compute_ns,) = CTX_HDR.unpack_from(ev.ctx)
        hidden = ev.ctx[CTX_HDR.size:]
        msg = self.recv(f"checksums of request {rid}", a.timeout_s + 10)
        _, mid, sums, dig, status = msg
        if mid != rid or sums is None:
            raise RuntimeError(f"{name}: request {rid}: the prefill side reported: {status}")
        mine = self.paged.sums(ev.pages)
        what = f"{name}, {tokens} tokens, {MODE_NAMES[mode]} (request {rid})"
        if status != 0:
            self.mismatches.append(f"{what}: prefiller DONE status {status}")
        elif mine != sums:
            bad = [i for i, (x, y) in enumerate(zip(mine, sums)) if x != y]
            self.mismatches.append(f"{what}: pages differ in layers {bad}")
        elif dig != digest(hidden):
            self.mismatches.append(f"{what}: extra context differs")
        else:
            self.verified += 1
        d.release(rid)
        return ev.elapsed_ns / 1e6, compute_ns / 1e6

    def close(self) -> None:
        for d in self.decs.values():
            d.close()


def median(v: List[float]) -> float:
    return statistics.median(v) if v else float("nan")


def summarize(a: argparse.Namespace, name: str, tokens: int, s: Dict[str, List[float]]) -> Dict[str, Any]:
    L = a.layers
    coloc, disagg, xfer = median(s["coloc"]), median(s["disagg"]), median(s["xfer"])
    tail = median([e - c for e, c in zip(s["disagg"], s["disagg_compute"])])
    kv_layer = tokens * 2 * a.kv_heads * a.head_dim * 2
    cl, xl = coloc / L, xfer / L
    flops = shape_of(a).flops_per_token(tokens) * tokens
    return {"transport": name, "tokens": tokens, "reps": len(s["coloc"]), "kv_layer_bytes": kv_layer,
            "compute_layer_ms": cl, "transfer_layer_ms": xl,
            "transfer_gbps": kv_layer / (xl * 1e6) if xl > 0 else float("nan"),
            "ttft_coloc_ms": coloc, "ttft_disagg_ms": disagg, "overhead_ms": disagg - coloc,
            "disagg_compute_ms": median(s["disagg_compute"]), "tail_ms": tail,
            "tflops": flops / (cl * 1e9) if cl > 0 else float("nan"), "hidden": xl <= cl, "samples": s}


def table(rows: List[Dict[str, Any]]) -> str:
    out = ["| tokens | KV/layer MiB | reps | compute/layer ms | TFLOP/s | transfer/layer ms | transfer GB/s | "
           "TTFT coloc ms | TTFT disagg ms | overhead ms | tail ms | hidden |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:--|"]
    for r in rows:
        out.append(f"| {r['tokens']} | {r['kv_layer_bytes'] / 2**20:.2f} | {r['reps']} | "
                   f"{r['compute_layer_ms']:.3f} | {r['tflops']:.1f} | {r['transfer_layer_ms']:.3f} | "
                   f"{r['transfer_gbps']:.2f} | "
                   f"{r['ttft_coloc_ms']:.2f} | {r['ttft_disagg_ms']:.2f} | {r['overhead_ms']:+.2f} | "
                   f"{r['tail_ms']:.2f} | {'yes' if r['hidden'] else '**no**'} |")
    return "\n".join(out)


def main(argv: Optional[List[str]] = None) -> int:
    a = parse_args(argv)
    # Before torch starts: the CUDA IPC path needs pools in cudaMalloc'd
    # segments, which expandable segments are not (xfer would stage instead).
    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:False")
    try:
        import torch
    except ImportError:
        return skip("torch is not installed (pip install torch); this benchmark computes with PyTorch")
    if a.device == "cuda":
        if not torch.cuda.is_available():
            return skip("no CUDA GPU (torch.cuda.is_available() is False); --device cpu runs a small check")
        if torch.cuda.device_count() < 2:
            return skip(f"needs 2 GPUs (prefill on cuda:0, decode on cuda:1); "
                        f"torch sees {torch.cuda.device_count()}")
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)  # pd_gpu_model
    sys.path.append(os.path.dirname(here))  # this checkout's xfer, unless PYTHONPATH names another
    import xfer

    if a.device == "cuda" and not xfer.cuda_available():
        return skip("libxfer cannot use CUDA here (xfer_cuda_available() is 0: no driver found by dlopen?)")
    t_start = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t_start:7.1f} s] {msg}", file=sys.stderr, flush=True)

    ctx = multiprocessing.get_context("spawn")
    conn, child_conn = ctx.Pipe()
    cfg = {k: v for k, v in vars(a).items()}
    proc = ctx.Process(target=prefill_main, args=(child_conn, cfg), daemon=True)
    proc.start()
    log(f"prefill process started ({'cuda:0' if a.device == 'cuda' else 'cpu'}); "
        f"decode here ({'cuda:1' if a.device == 'cuda' else 'cpu'})")
    dec: Optional[Decode] = None
    results: List[Dict[str, Any]] = []
    skipped: List[int] = []
    info: Dict[str, Any] = {}
    one_page: Dict[str, float] = {}
    rc = 0
    try:
        dec = Decode(a, conn, torch)
        info = dec.recv("readiness (model and pools set up)", 600)[1]
        log(f"prefill ready in {info['setup_s']:.1f} s on {info['device']}; attention: {info['attention']}; "
            f"KV pool {info['pool_bytes'] / 2**20:.0f} MiB per side")
        dec.start(a.transports)
        for name in a.transports:
            dec.ask(name, XFER, a.page_tokens)  # the first use of a connection pays its setup
            # What any request costs beyond its bytes: the request message,
            # the prefiller's reaction, one page per layer and the context.
            one_page[name] = median([dec.ask(name, XFER, a.page_tokens)[0] for _ in range(5)])
        log("transports: " + "; ".join(f"{n} = {dec.providers[n]} (one-page request {one_page[n]:.2f} ms)"
                                       for n in a.transports))
        samples = {(n, s): {"coloc": [], "disagg": [], "disagg_compute": [], "xfer": []}
                   for n in a.transports for s in a.seqs}
        rep_times: List[float] = []  # seconds of one repetition of each length run so far
        for si, tokens in enumerate(a.seqs):
            reps = a.long_reps if tokens >= a.long_from else a.reps
            if len(rep_times) >= 2:
                # The next length costs what the last did times the growth
                # seen between the last two (attention is quadratic).
                growth = min(4.5, max(1.0, rep_times[-1] / max(rep_times[-2], 1e-3)))
                est = rep_times[-1] * growth * reps
                if time.perf_counter() - t_start + est > a.budget_s:
                    skipped = a.seqs[si:]
                    log(f"budget: {tokens} tokens would take about {est:.0f} s more, past --budget-s "
                        f"{a.budget_s:.0f}: skipping {skipped}")
                    break
            b0 = time.perf_counter()
            for r in range(reps):
                for name in a.transports:
                    s = samples[(name, tokens)]
                    s["coloc"].append(dec.ask(name, COLOC, tokens)[1])
                    e, c = dec.ask(name, DISAGG, tokens)
                    s["disagg"].append(e)
                    s["disagg_compute"].append(c)
                    s["xfer"].append(dec.ask(name, XFER, tokens)[0])
                    log(f"{tokens} tokens, {name}, rep {r + 1}/{reps}: compute {s['coloc'][-1]:.2f} ms, "
                        f"disaggregated {e:.2f} ms (its compute {c:.2f}), transfer only {s['xfer'][-1]:.2f} ms")
            rep_times.append((time.perf_counter() - b0) / reps)
            for name in a.transports:
                results.append(summarize(a, name, tokens, samples[(name, tokens)]))
    except BaseException as ex:  # noqa: BLE001 - reported, then the tables measured so far
        log(f"FAILED: {ex}")
        rc = 1
    finally:
        try:
            conn.send(("quit",))
            while conn.poll(30) and conn.recv()[0] != "bye":
                pass
        except (OSError, EOFError):
            pass
        proc.join(10)
        if proc.is_alive():
            proc.terminate()
        if dec is not None:
            dec.close()

    print(f"# pd_gpu_bench {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}: prefill "
          f"{'cuda:0' if a.device == 'cuda' else 'cpu'}, decode {'cuda:1' if a.device == 'cuda' else 'cpu'} "
          f"({info.get('device', '?')}), torch {torch.__version__}")
    print(f"# model per rank: {a.layers} layers, hidden {a.hidden}, {a.q_heads} q heads and {a.kv_heads} kv "
          f"head(s) of {a.head_dim}, dense MLP {a.ffn}, bf16; attention: {info.get('attention', '?')}; "
          f"KV pages of {a.page_tokens} tokens, K and V in separate planes; GPU waits: {a.gpu_wait}; "
          f"PYTORCH_CUDA_ALLOC_CONF={os.environ.get('PYTORCH_CUDA_ALLOC_CONF', '')}")
    if dec is not None:
        print(f"# verified {dec.verified} requests page by page (position-weighted checksums per layer) "
              f"and their extra context; mismatches: {len(dec.mismatches)}")
    for name in a.transports:
        rows = [r for r in results if r["transport"] == name]
        if not rows:
            continue
        prov = dec.providers.get(name, "?") if dec else "?"
        print(f"\n### {name}: {TRANSPORTS[name][2]} (provider {prov})\n")
        print(f"A one-page request ({a.page_tokens} tokens, every layer, admission to landed): "
              f"{one_page.get(name, float('nan')):.2f} ms (median of 5).\n")
        print(table(rows))
    if skipped:
        print(f"\n# not run (--budget-s {a.budget_s:.0f}): {', '.join(map(str, skipped))} tokens")
    print(f"\n# wall time {time.perf_counter() - t_start:.1f} s")
    if dec is not None and dec.mismatches:
        print("\n".join("MISMATCH: " + m for m in dec.mismatches), file=sys.stderr)
        rc = 1
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"config": {k: v for k, v in vars(a).items() if k != "json"}, "info": info,
                       "torch": torch.__version__, "results": results, "skipped": skipped,
                       "one_page_request_ms": one_page,
                       "verified": dec.verified if dec else 0,
                       "mismatches": dec.mismatches if dec else []}, f, indent=1)
    return rc


if __name__ == "__main__":
    sys.exit(main())
