"""MoE test ranks: W processes, an all_gather relayed by the parent over
pipes, and the reference dispatch and combine computed with plain torch ops
from every rank's inputs (which every rank regenerates from the seed).

Used by test_moe.py (CPU path) and test_moe_cuda.py (GPU); also runnable on
its own for the GPU machine (scripts/device-moe.sh):

    python3 python/tests/moe_ranks.py --world 2 --device cuda --mode ipc
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import signal
import struct
import sys
import threading
import time
import traceback
from typing import Any, Callable, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))


# ------------------------------------------------------------ the processes

def _frame(parts: List[bytes]) -> bytes:
    return struct.pack("<I", len(parts)) + b"".join(struct.pack("<I", len(p)) + p for p in parts)


def _unframe(b: bytes) -> List[bytes]:
    (n,), o, out = struct.unpack_from("<I", b), 4, []
    for _ in range(n):
        (k,) = struct.unpack_from("<I", b, o)
        out.append(b[o + 4:o + 4 + k])
        o += 4 + k
    return out


def _child(conn, rank: int, world: int, fn_name: str, spec: Dict[str, Any]) -> None:
    import faulthandler
    import signal

    # A crash, or a kill by a step's timeout, prints every thread's Python
    # stack to stderr first (the device logs had only "signal 11" at teardown).
    faulthandler.enable(all_threads=True)
    faulthandler.register(signal.SIGTERM, all_threads=True, chain=True)
    sys.path.insert(0, HERE)
    sys.path.insert(1, os.path.dirname(HERE))
    try:
        def all_gather(data: bytes) -> List[bytes]:
            conn.send_bytes(b"G" + data)
            return _unframe(conn.recv_bytes())

        if ":" in fn_name:  # "module:function", e.g. the benchmark's
            import importlib

            sys.path.insert(2, os.path.join(os.path.dirname(HERE), "bench"))
            mod, name = fn_name.split(":")
            fn = getattr(importlib.import_module(mod), name)
        else:
            fn = globals()[fn_name]
        result = fn(rank, world, all_gather, spec)
        conn.send_bytes(b"D" + json.dumps(result).encode())
    except BaseException:  # report everything: the parent shows it
        conn.send_bytes(b"E" + traceback.format_exc().encode())
    finally:
        conn.close()


def run_ranks(world: int, fn_name: str, spec: Dict[str, Any], timeout: float = 240.0,
              may_die: Optional[int] = None) -> List[Any]:
    """Runs fn_name(rank, world, all_gather, spec) in `world` processes and
    returns their results; raises with every failing rank's traceback."""
    ctx = mp.get_context("spawn")
    conns, procs = [], []
    for r in range(world):
        a, b = ctx.Pipe()
        p = ctx.Process(target=_child, args=(b, r, world, fn_name, spec), daemon=True)
        p.start()
        b.close()
        conns.append(a)
        procs.append(p)
    results: List[Any] = [None] * world
    errors: Dict[int, str] = {}
    alive = set(range(world))
    pending: Dict[int, bytes] = {}
    end = time.monotonic() + timeout
    try:
        while alive:
            if time.monotonic() > end:
                raise TimeoutError(f"ranks {sorted(alive)} still running after {timeout} s")
            ready = mp.connection.wait([conns[r] for r in alive], timeout=1.0)
            for c in ready:
                r = conns.index(c)
                try:
                    msg = c.recv_bytes()
                except (EOFError, OSError):
                    alive.discard(r)
                    if r != may_die:
                        errors[r] = "the process died"
                    continue
                tag, body = msg[:1], msg[1:]
                if tag == b"G":
                    pending[r] = body
                elif tag == b"D":
                    results[r] = json.loads(body)
                    alive.discard(r)
                else:
                    errors[r] = body.decode(errors="replace")
                    alive.discard(r)
            # a gather completes once every rank still running has sent its part
            if pending and set(pending) >= alive:
                if len(pending) == world or may_die is not None:
                    parts = [pending.get(r, b"") for r in range(world)]
                    for r in pending:
                        conns[r].send_bytes(_frame(parts))
                    pending.clear()
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
    if errors:
        raise AssertionError("\n".join(f"--- rank {r}:\n{t}" for r, t in sorted(errors.items())))
    return results


class Stall:
    """Writes the MoE's state to stderr if the block takes longer than
    `after` seconds (a hang shows in the log with every flag), and when the
    block raises."""

    def __init__(self, ep: Any, what: str, after: float = 8.0):
        self.ep, self.what, self.after = ep, what, after
        self.timer: Optional[threading.Timer] = None

    def _dump(self, why: str) -> None:
        try:
            state = self.ep.debug_state()
        except Exception as ex:  # noqa: BLE001 - diagnostics must not hide the failure
            state = f"(no state: {ex})"
        sys.stderr.write(f"[moe] {self.what}: {why}\n{state}\n")
        sys.stderr.flush()

    def _tick(self) -> None:
        self._dump(f"still running after {self.after:.0f} s")
        self.timer = threading.Timer(self.after, self._tick)
        self.timer.daemon = True
        self.timer.start()

    def __enter__(self) -> "Stall":
        self.timer = threading.Timer(self.after, self._tick)
        self.timer.daemon = True
        self.timer.start()
        return self

    def __exit__(self, typ, val, tb) -> None:
        if self.timer:
            self.timer.cancel()
        if typ is not None:
            self._dump(f"failed: {typ.__name__}: {val}")


# -------------------------------------------------------------- the inputs

def gen_round(spec: Dict[str, Any], round_: int, rank: int):
    """One rank's tokens for one round: n (max_tokens every 4th round, 0 on
    some ranks, else random), x, topk_idx (shapes by round: uniform; skewed
    onto a few experts so that some get nothing and private slots
    overflow; every slot on one rank; empty slots), topk_weights."""
    import torch

    W, E, K, H, T = spec["world"], spec["experts"], spec["topk"], spec["hidden"], spec["max_tokens"]
    L = E // W
    g = torch.Generator().manual_seed(1000003 * round_ + 7919 * rank + spec.get("seed", 0))
    if round_ % 4 == 0:
        n = T
    elif round_ % 4 == 1 and (round_ + rank) % 3 == 0:
        n = 0
    else:
        n = int(torch.randint(1, T + 1, (1,), generator=g))
    x = (torch.randn(n, H, generator=g) * 2).to(torch.bfloat16)
    shape = round_ % 5
    scores = torch.rand(n, E, generator=g)
    if shape == 1:  # skewed: the first experts of ranks 0 and 1 win most of the time
        scores[:, [0, 1, L % E, (L + 1) % E]] += 0.9
    elif shape == 2:  # every slot on the rank of the first
        home = torch.randint(0, W, (n,), generator=g)
        mask = torch.arange(E).unsqueeze(0) // L == home.unsqueeze(1)
        scores = scores + mask.float() * 2
    elif shape == 3 and W > 1:  # the last rank's experts are never chosen
        scores[:, E - L:] = -1
    idx = scores.topk(K, dim=1).indices
    if shape == 2 and L < K:  # a rank has fewer than K experts: leave the rest empty
        idx[:, L:] = -1
    if shape == 3:
        idx[torch.rand(n, K, generator=g) < 0.2] = -1
    w = torch.rand(n, K, generator=g)
    return n, x, idx.to(torch.int64), w.float()


# ------------------------------------------------------------ the reference

def expert_fn(xq, scales, e: int, fp8: bool):
    """The tests' expert: bf16 output depending on the row and the expert."""
    import torch

    if fp8:  # xq: the fp8 bytes as uint8 (indexing and cat of fp8 tensors need not exist)
        n, H = xq.shape
        xf = xq.view(torch.float8_e4m3fn).float().view(n, H // 128, 128) * scales.view(n, H // 128, 1)
        xf = xf.view(n, H)
    else:
        xf = xq.float()
    return (xf * (1.0 + e / 16.0)).to(torch.bfloat16)


def reference_rows(spec: Dict[str, Any], ins: List[Any], me: int, e: int):
    """Rows expert e gets, in (source rank, token, slot) order: (x, scales, ranks, tokens)."""
    import torch

    xs, ss, rk, tk = [], [], [], []
    for s, (n, xq, sc, idx, _) in enumerate(ins):
        hit = (idx == e).nonzero()  # row-major: (token, slot) order
        tok = hit[:, 0]
        xs.append(xq[tok])
        if sc is not None:
            ss.append(sc[tok])
        rk.append(torch.full((len(tok),), s, dtype=torch.int32))
        tk.append(tok.to(torch.int32))
    return (torch.cat(xs), torch.cat(ss) if ss else None, torch.cat(rk), torch.cat(tk))


def reference_combine(spec: Dict[str, Any], xq, sc, idx, w, fp8: bool):
    import torch

    n, K = idx.shape
    acc = torch.zeros(n, spec["hidden"], dtype=torch.float32)
    for k in range(K):
        e = idx[:, k]
        for ev in e.unique().tolist():
            if ev < 0:
                continue
            rows = (e == ev).nonzero()[:, 0]
            y = expert_fn(xq[rows], sc[rows] if sc is not None else None, ev, fp8).float()
            prod = w[rows, k:k + 1] * y  # one rounding for the product ...
            acc[rows] = acc[rows] + prod  # ... and one for the sum, in slot order
    return acc.to(torch.bfloat16)


# ------------------------------------------------------------- one rank

def _moe_kwargs(spec: Dict[str, Any]) -> Dict[str, Any]:
    kw: Dict[str, Any] = dict(max_tokens=spec["max_tokens"], num_experts=spec["experts"], topk=spec["topk"],
                              hidden=spec["hidden"], timeout_ms=spec.get("timeout_ms", 30000),
                              provider=spec["provider"], heartbeat_ms=spec.get("heartbeat_ms", 1000))
    if spec["provider"] in ("tcp", "tcp;ofi_rxm"):
        kw["nics"] = os.environ.get("XFER_NICS", "lo")
    for k in ("private_tokens", "overflow_tokens", "layout", "expert_capacity", "expert_align",
              "same_host", "gpu_wait"):
        if k in spec:
            kw[k] = spec[k]
    return kw


def check_rounds(rank: int, world: int, all_gather: Callable, spec: Dict[str, Any]) -> Dict[str, Any]:
    """Builds an MoE, runs spec["rounds"] rounds, checks every expert row and
    every combined token bit for bit against the reference."""
    import torch

    from xfer import moe

    dev = torch.device(spec.get("device", "cpu"))
    if dev.type == "cuda":  # rank r on GPU r % count (all on one GPU here)
        torch.cuda.set_device(spec.get("gpu", rank % torch.cuda.device_count()))
    fp8 = spec.get("fp8", False)
    group = moe.RankGroup(rank, world, all_gather, host_of=spec.get("host_of"))
    kw = _moe_kwargs(spec)
    t_start = time.monotonic()
    ep = moe.MoE(group, dispatch_dtype=torch.float8_e4m3fn if fp8 else torch.bfloat16, device=dev, **kw)
    t_built = time.monotonic()
    L = ep.local_experts
    split = spec.get("split", False)
    checked = rows_checked = 0
    for r in range(1, spec["rounds"] + 1):
        with Stall(ep, f"round {r}"):
            checked, rows_checked = _one_round(ep, spec, r, rank, world, fp8, split, L, dev, checked,
                                               rows_checked)
    st = ep.stats()
    t_rounds = time.monotonic()
    ep.close()
    return {"tokens": checked, "rows": rows_checked, "rounds": st.rounds, "private": st.private_records,
            "overflow": st.overflow_records, "busy_ns": st.busy_ns,
            "seconds": [round(t_built - t_start, 2), round(t_rounds - t_built, 2),
                        round(time.monotonic() - t_rounds, 2)]}


def _one_round(ep, spec, r, rank, world, fp8, split, L, dev, checked, rows_checked):
    """One round of check_rounds: dispatch, the checks, the experts, combine."""
    import torch

    from xfer import moe

    ins = []
    for s in range(world):
        n, x, idx, w = gen_round(spec, r, s)
        xq, sc = moe.quantize_fp8(x) if fp8 else (x, None)
        ins.append((n, xq.view(torch.uint8) if fp8 else xq, sc, idx, w))
    n, x, idx, w = gen_round(spec, r, rank)
    send_x = x.to(dev)
    if fp8 and spec.get("prequantized"):
        send_x, sc_in = moe.quantize_fp8(x)
        res = ep.dispatch(send_x.to(dev), idx.to(dev), w.to(dev), x_scales=sc_in.to(dev), do_recv=not split)
    else:
        res = ep.dispatch(send_x, idx.to(dev), w.to(dev), do_recv=not split)
    if split:  # overlap: something else runs between the halves
        torch.ones(64, 64, device=dev).sum()
        res = ep.dispatch(do_send=False, do_recv=True, handle=res.handle)
    counts = res.expert_counts.cpu()
    ep.check()  # a failed round has empty outputs: say why rather than 'rows differ'
    offsets = res.expert_offsets.cpu()
    ex = res.expert_x.cpu().reshape(-1, spec["hidden"])
    if fp8:
        ex = ex.view(torch.uint8)
    es = res.expert_scales.cpu().reshape(ex.shape[0], -1) if fp8 else None
    srank = res.handle.src_rank.cpu().reshape(-1)
    stok = res.handle.src_token.cpu().reshape(-1)
    y = torch.zeros(ex.shape, dtype=torch.bfloat16)
    for le in range(L):
        e = rank * L + le
        rx, rs, rr, rt = reference_rows(spec, ins, rank, e)
        c, o = int(counts[le]), int(offsets[le])
        assert c == len(rx), f"round {r} expert {e}: {c} rows, want {len(rx)}"
        got = ex[o:o + c]
        assert torch.equal(got.view(torch.uint8), rx.view(torch.uint8)), \
            f"round {r} expert {e}: rows differ at {(got.view(torch.uint8) != rx.view(torch.uint8)).nonzero()[:4].tolist()}"
        if fp8:
            assert torch.equal(es[o:o + c], rs), f"round {r} expert {e}: scales differ"
        assert torch.equal(srank[o:o + c], rr) and torch.equal(stok[o:o + c], rt), \
            f"round {r} expert {e}: row sources differ"
        y[o:o + c] = expert_fn(got, es[o:o + c] if fp8 else None, e, fp8)
        rows_checked += c
    if r % 3 == 2:
        return checked, rows_checked  # a dispatch-only round: the next dispatch skips the combine
    yd = y.reshape(res.expert_x.shape).to(dev)
    if split:
        ep.combine(yd, res.handle, do_recv=False)
        torch.ones(64, 64, device=dev).sum()
        out = ep.combine(handle=res.handle, do_send=False)
    else:
        out = ep.combine(yd, res.handle)
    want = reference_combine(spec, ins[rank][1], ins[rank][2], idx, w, fp8)
    got = out.cpu()
    ep.check()
    assert torch.equal(got.view(torch.int16), want.view(torch.int16)), \
        f"round {r}: combine differs at {int((got != want).any(dim=1).nonzero()[0])}"
    checked += n
    return checked, rows_checked


def check_dead_rank(rank: int, world: int, all_gather: Callable, spec: Dict[str, Any]) -> Dict[str, Any]:
    """The last rank dies in the middle of round 3; every other rank's next
    call fails, within the deadline, with an error that names it."""
    import xfer
    from xfer import moe

    import torch

    dev = torch.device(spec.get("device", "cpu"))
    if dev.type == "cuda":  # the GPU path (run moe4-1 ran this check on the CPU: no device given)
        torch.cuda.set_device(spec.get("gpu", rank % torch.cuda.device_count()))
    group = moe.RankGroup(rank, world, all_gather)
    ep = moe.MoE(group, device=dev, **_moe_kwargs(spec))
    t0 = None
    for r in range(1, 9):
        n, x, idx, w = gen_round(spec, r, rank)
        x, idx, w = x.to(dev), idx.to(dev), w.to(dev)
        if r == 3:
            t0 = time.monotonic()
        try:
            d = ep.dispatch(x, idx, w, do_recv=False)
            if r == 3 and rank == world - 1:
                if spec.get("sigkill"):  # as the OOM killer or a scheduler does: no exit path at all
                    os.kill(os.getpid(), signal.SIGKILL)
                os._exit(0)  # route vector and tokens sent, nothing received
            d = ep.dispatch(do_send=False, handle=d.handle)
            y = d.expert_x.clone()
            ep.combine(y, d.handle)
            if dev.type == "cuda":
                # GPU halves only launch: wait for the round (its waits have the deadline), then ask
                torch.cuda.synchronize()
                ep.check()
        except xfer.Error as ex:
            took = time.monotonic() - (t0 or time.monotonic())
            assert f"rank {world - 1}" in str(ex), f"the error does not name the dead rank: {ex}"
            assert took < spec["timeout_ms"] / 1000 + 3, f"failed only after {took:.1f} s"
            try:
                ep.dispatch(x, idx, w)
                raise AssertionError("a failed MoE object accepted another dispatch")
            except xfer.Error:
                pass  # the object stays failed
            ep.close()
            return {"error": str(ex), "seconds": took, "type": type(ex).__name__}
    raise AssertionError("every round succeeded although a rank died")


def check_capacity(rank: int, world: int, all_gather: Callable, spec: Dict[str, Any]) -> Dict[str, Any]:
    """More rows for an expert than its capacity: every rank fails alike."""
    import torch

    import xfer
    from xfer import moe

    group = moe.RankGroup(rank, world, all_gather)
    ep = moe.MoE(group, **{**_moe_kwargs(spec), "expert_capacity": 3})
    n = spec["max_tokens"]
    idx = torch.full((n, spec["topk"]), -1, dtype=torch.int64)
    idx[:, 0] = 0  # every token of every rank to expert 0
    x = torch.zeros(n, spec["hidden"], dtype=torch.bfloat16)
    try:
        ep.dispatch(x, idx, torch.ones(n, spec["topk"]))
    except xfer.NoSpace as ex:
        assert "expert 0" in str(ex), str(ex)
        ep.close()
        return {"error": str(ex)}
    raise AssertionError("the dispatch over capacity succeeded")


def check_graph(rank: int, world: int, all_gather: Callable, spec: Dict[str, Any]) -> Dict[str, Any]:
    """GPU only: dispatch, an expert step and combine captured in one CUDA
    graph, replayed over several rounds of new inputs, checked each time."""
    import torch

    from xfer import moe

    torch.cuda.set_device(spec.get("gpu", rank % torch.cuda.device_count()))
    dev = torch.device("cuda")
    group = moe.RankGroup(rank, world, all_gather, host_of=spec.get("host_of"))
    ep = moe.MoE(group, device=dev, **_moe_kwargs(spec))
    T, H, K, L = spec["max_tokens"], spec["hidden"], spec["topk"], ep.local_experts
    sx = torch.zeros(T, H, dtype=torch.bfloat16, device=dev)
    si = torch.zeros(T, K, dtype=torch.int64, device=dev)
    sw = torch.zeros(T, K, dtype=torch.float32, device=dev)
    factor = (1.0 + (rank * L + torch.arange(L, device=dev)).float() / 16.0).view(L, 1, 1)
    # warm-up round outside the graph (its shapes: T tokens every round)
    def step():
        d = ep.dispatch(sx, si, sw)
        y = (d.expert_x.float() * factor).to(torch.bfloat16)
        return d, ep.combine(y, d.handle)
    spec_t = {**spec, "rounds": 0}
    n, x, idx, w = gen_round(spec_t, 4, rank)  # round 4: T tokens
    sx.copy_(x), si.copy_(idx), sw.copy_(w)
    torch.cuda.synchronize()
    # all ranks capture at once: the rounds inside the capture are not run
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        d, out = step()  # eager warm-up round
        torch.cuda.synchronize()
        all_gather(b"warm")
        # thread_local: the engine's worker may use CUDA while we capture
        with torch.cuda.graph(g, stream=s, capture_error_mode="thread_local"):
            d, out = step()
    torch.cuda.synchronize()
    checked = 0
    for r in (4, 8, 12, 16):
        ins = []
        for s_ in range(world):
            n_, x_, i_, w_ = gen_round(spec_t, r, s_)
            ins.append((n_, x_, None, i_, w_))
        n, x, idx, w = ins[rank][0], ins[rank][1], ins[rank][3], ins[rank][4]
        sx.copy_(x), si.copy_(idx), sw.copy_(w)
        torch.cuda.synchronize()
        all_gather(b"go")
        with Stall(ep, f"replay {r}"):
            g.replay()
            torch.cuda.synchronize()
            ep.check()
        want = reference_combine(spec, x, None, idx, w, False)
        assert torch.equal(out.cpu().view(torch.int16), want.view(torch.int16)), f"replay {r}: combine differs"
        for le in range(L):
            rx, _, _, _ = reference_rows(spec, ins, rank, rank * L + le)
            c = int(d.expert_counts[le])
            assert c == len(rx), f"replay {r}: expert {rank * L + le} has {c} rows, want {len(rx)}"
        checked += n
    ep.check()
    ep.close()
    return {"tokens": checked}


def check_many(rank: int, world: int, all_gather: Callable, spec: Dict[str, Any]) -> List[Any]:
    """Several checks in the same processes (each builds its own MoE):
    spec["scenarios"] is a list of (function name, spec overrides)."""
    out = []
    for name, extra in spec["scenarios"]:
        out.append(globals()[name](rank, world, all_gather, {**spec, **extra}))
    return out


# -------------------------------------------------------------- standalone

def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--mode", default="engine", choices=["engine", "ipc", "mixed"],
                    help="engine: every rank through the engine; ipc: one host (CUDA IPC); "
                    "mixed: hosts of two ranks")
    ap.add_argument("--provider", default="tcp")
    ap.add_argument("--check", default="rounds", choices=["rounds", "graph", "dead", "capacity"])
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--timeout-ms", type=int, default=20000, help="the MoE's round deadline")
    ap.add_argument("--sigkill", action="store_true", help="dead: the rank dies by SIGKILL (else os._exit)")
    ap.add_argument("--fp8", action="store_true")
    ap.add_argument("--split", action="store_true")
    ap.add_argument("--gpu-wait", default="auto")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--layout", default="padded")
    ap.add_argument("--variants", default="",
                    help="rounds only: comma list of extra runs in the same processes, each a new MoE "
                    "(fp8, split, fp8-split, packed)")
    a = ap.parse_args(argv)
    spec: Dict[str, Any] = dict(world=a.world, experts=8 * a.world, topk=6 if a.world > 2 else 4,
                                hidden=a.hidden, max_tokens=a.max_tokens, rounds=a.rounds,
                                private_tokens=4, provider=a.provider, device=a.device, fp8=a.fp8,
                                split=a.split, gpu_wait=a.gpu_wait, layout=a.layout, timeout_ms=a.timeout_ms,
                                sigkill=a.sigkill)
    if a.layout == "packed":
        spec["expert_align"] = 8
    if a.mode == "engine":
        spec["same_host"] = False
        os.environ["XFER_GPU_IPC"] = "0"  # through the NIC (staged), not the engine's own IPC
    elif a.mode == "mixed":
        spec["host_of"] = [r // 2 for r in range(a.world)]
    fn = {"rounds": "check_rounds", "graph": "check_graph", "dead": "check_dead_rank",
          "capacity": "check_capacity"}[a.check]
    if a.variants and a.check == "rounds":
        extra = {"fp8": {"fp8": True}, "split": {"split": True}, "fp8-split": {"fp8": True, "split": True},
                 "packed": {"layout": "packed", "expert_align": 8}}
        spec["scenarios"] = [("check_rounds", {})] + [("check_rounds", extra[v]) for v in a.variants.split(",")]
        fn = "check_many"
    if a.device != "cpu":
        import torch

        if not torch.cuda.is_available():
            print(f"no CUDA device here (torch {torch.__version__}): nothing to run on {a.device}")
            return 2
    t0 = time.monotonic()
    res = run_ranks(a.world, fn, spec, may_die=a.world - 1 if a.check == "dead" else None)
    print(f"moe {a.check}: {a.world} ranks, device {a.device}, mode {a.mode}, provider {a.provider}, "
          f"fp8 {a.fp8}, split {a.split}, wait {a.gpu_wait}: OK in {time.monotonic() - t0:.1f} s")
    for r, x in enumerate(res):
        print(f"  rank {r}: {json.dumps(x)}")
    if spec.get("scenarios"):
        print(f"  variants run: base, {a.variants}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
