"""xfer.moe latency: dispatch and combine, each half and both, p50/p99 over
>= 1,000 rounds, W ranks as processes (on one GPU they share it).

    python3 python/bench/moe_bench.py --shape decode --world 2 --mode ipc
    python3 python/bench/moe_bench.py --shape prefill --world 2 --mode ipc
    python3 python/bench/moe_bench.py --shape decode --world 2 --mode engine --iters 300

Shapes (the issue's): decode 128 tokens per rank, prefill 4096; hidden 7168,
top-8 of 256 experts, fp8 dispatch (bf16 tokens quantized by the dispatch
kernel, one scale per 128 channels, as DeepEP's use_fp8) and bf16 combine.
Routing: uniform random top-8, the same every round (captured).

GPU timing: each round is a CUDA graph node sequence stamp, dispatch send,
stamp, dispatch recv, stamp, combine send, stamp, combine recv, stamp, where
a stamp is a one-thread kernel storing the GPU's global timer (one clock for
every process of the device); graphs of --per-graph rounds are replayed
back to back (no host in the loop), the ranks interlocked only by the
module's own flags. A stamp costs a kernel of its own: the "stamp" row is
two stamps back to back in the same graphs, the overhead included once in
each phase figure. Per rank and, per round, the slowest rank.

The CPU path (--device cpu) times the halves with the monotonic clock.
The host proxy's share is its busy time per round (xfer_moe_get_stats) over
the round's dispatch+combine time: 0 on the same-host path, where the proxy
only watches the deadline.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Callable, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
sys.path.insert(1, os.path.join(HERE, ".."))

import moe_ranks  # noqa: E402

SHAPES = {
    "decode": dict(max_tokens=128, hidden=7168, topk=8, experts=256),
    "prefill": dict(max_tokens=4096, hidden=7168, topk=8, experts=256),
}
PHASES = ["dispatch_send", "dispatch_recv", "dispatch", "combine_send", "combine_recv", "combine", "stamp"]
# the A/B knobs of the GPU kernels (docs/moe.md): the header says which were set
KNOBS = ["XFER_MOE_PDL", "XFER_MOE_ROUTE_WIDE", "XFER_MOE_FUSE", "XFER_MOE_SYS_FENCES", "XFER_MOE_GRID"]
# Published figures (the issue; EP8 on 8 GPUs of one node, ConnectX-7), for the printout only.
PUBLISHED = {"decode": {"fabric-lib EP8 dispatch": 50.5, "fabric-lib EP8 combine": 65.3,
                        "DeepEP EP8 dispatch": 42.6, "DeepEP EP8 combine": 72.0}}


def pct(v: List[float], p: float) -> float:
    s = sorted(v)
    return s[min(len(s) - 1, int(round(p / 100.0 * (len(s) - 1))))] if s else float("nan")


def bench_rank(rank: int, world: int, all_gather: Callable, spec: Dict[str, Any]) -> Dict[str, Any]:
    import torch

    from xfer import moe
    from xfer import _moe_lib as ml

    gpu = spec["device"] != "cpu"
    if gpu:  # one GPU: every rank on it; more: rank r on GPU r % count
        torch.cuda.set_device(rank % torch.cuda.device_count())
    dev = torch.device("cuda" if gpu else "cpu")
    T, H, K, E = spec["max_tokens"], spec["hidden"], spec["topk"], spec["experts"]
    kw = moe_ranks._moe_kwargs({**spec, "timeout_ms": spec.get("timeout_ms", 10000)})
    group = moe.RankGroup(rank, world, all_gather, host_of=spec.get("host_of"))
    ep = moe.MoE(group, dispatch_dtype=torch.float8_e4m3fn, device=dev, **kw)
    g = torch.Generator().manual_seed(1234 + rank)
    x = (torch.randn(T, H, generator=g)).to(torch.bfloat16).to(dev)
    idx = torch.rand(T, E, generator=g).topk(K, dim=1).indices.to(dev)
    w = torch.rand(T, K, generator=g).to(dev)
    # the experts' output: random, made where it lives (gigabytes for prefill)
    eo = torch.empty(ep._expert_x.shape, dtype=torch.bfloat16, device=dev).normal_()

    def round_(st=None):
        s = st if st is not None else (lambda i: None)
        s(0)
        d = ep.dispatch(x, idx, w, do_recv=False)
        s(1)
        d = ep.dispatch(do_send=False, handle=d.handle)
        s(2)
        ep.combine(eo, d.handle, do_recv=False)
        s(3)
        ep.combine(handle=d.handle, do_send=False)
        s(4)
        s(5)

    iters, warm = spec["iters"], spec["warmup"]
    res: Dict[str, Any] = {"rank": rank, "wait": ep.gpu_wait, "mps": ep.mps, "remote_ranks": ep.remote_ranks}
    if not gpu:
        times: Dict[str, List[float]] = {p: [] for p in PHASES[:-1]}
        for i in range(warm + iters):
            t = [time.perf_counter()]
            round_(lambda j: t.append(time.perf_counter()) if j < 5 else None)
            if i >= warm:
                times["dispatch_send"].append(t[2] - t[1])
                times["dispatch_recv"].append(t[3] - t[2])
                times["dispatch"].append(t[3] - t[1])
                times["combine_send"].append(t[4] - t[3])
                times["combine_recv"].append(t[5] - t[4])
                times["combine"].append(t[5] - t[3])
        res["us"] = {p: [v * 1e6 for v in vs] for p, vs in times.items()}
    else:
        per = spec["per_graph"]
        stamps = torch.zeros(per, 6, dtype=torch.int64, device=dev)
        stream = torch.cuda.Stream()

        def stamper(it):
            return lambda j: ml.g.cuda_stamp(stamps[it, j].data_ptr(), torch.cuda.current_stream().cuda_stream)

        with torch.cuda.stream(stream), moe_ranks.Stall(ep, "warm-up rounds", after=15):
            for _ in range(warm):  # eager rounds: warms every path, and the peers up
                round_()
            torch.cuda.synchronize()
            ep.check()
            all_gather(b"capture")
            graph = None
            if spec.get("graph", True):
                try:  # thread_local: the engine's worker may use CUDA meanwhile
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graph, stream=stream, capture_error_mode="thread_local"):
                        for it in range(per):
                            round_(stamper(it))
                except Exception as ex:  # noqa: BLE001 - reported, then timed eagerly
                    res["graph_error"] = f"{type(ex).__name__}: {ex}"
                    graph = None
                    # nothing captured ran, but the object's call order moved
                    # on inside the capture: start the eager rounds afresh
                    ep._state = "idle"  # noqa: SLF001
        torch.cuda.synchronize()
        # every rank says whether it captured: all replay graphs, or all run eagerly
        ok = all(b == b"1" for b in all_gather(b"1" if graph is not None else b"0"))
        if not ok:
            graph = None
            ep.check()
        res["graph"] = graph is not None
        reps = (iters + per - 1) // per
        log = torch.zeros(reps, per, 6, dtype=torch.int64, device=dev)
        all_gather(b"go")
        t0 = time.perf_counter()
        with torch.cuda.stream(stream), moe_ranks.Stall(ep, "timed rounds", after=30):
            for r in range(reps):
                if graph is not None:
                    graph.replay()
                else:
                    for it in range(per):
                        round_(stamper(it))
                log[r].copy_(stamps)
            torch.cuda.synchronize()
        wall = time.perf_counter() - t0
        st = log.view(-1, 6).cpu().tolist()[:iters]
        res["stamps"] = st
        res["wall_s"] = wall
        tr = ep.kernel_trace()
        if tr is not None:  # the timed rounds only (the device counts rounds from 1)
            res["trace"] = [r for r in tr if r[0] > warm][-iters:]
        ep.check()
    stats = ep.stats()
    res["proxy"] = {"rounds": stats.rounds, "busy_ns": stats.busy_ns, "route_to_recv_ns": stats.route_to_recv_ns,
                    "comb_to_flag_ns": stats.comb_to_flag_ns}
    ep.close()
    return res


def phases_from_stamps(st: List[List[int]]) -> Dict[str, List[float]]:
    out: Dict[str, List[float]] = {p: [] for p in PHASES}
    for s in st:
        us = lambda a, b: (s[b] - s[a]) / 1e3  # noqa: E731
        out["dispatch_send"].append(us(0, 1))
        out["dispatch_recv"].append(us(1, 2))
        out["dispatch"].append(us(0, 2))
        out["combine_send"].append(us(2, 3))
        out["combine_recv"].append(us(3, 4))
        out["combine"].append(us(2, 4))
        out["stamp"].append(us(4, 5))
    return out


def trace_report(res: List[Dict[str, Any]]) -> List[str]:
    """Where a round's time goes, from the kernels' own stamps
    (XFER_MOE_TRACE=1): per rank and kernel the run time (first block's
    start to last block's end) and the gap before it (its start minus the
    end of the kernel before it on that rank's stream: launch or scheduling
    delay, e.g. SMs held by the other process); per wait, how long after the
    peer's kernel that raised its flag it ended; and one median round of
    every rank on one clock."""
    from xfer import _moe_lib as ml

    names = list(ml.TRACE_POINTS)
    W = len(res)
    per: List[Dict[int, List[int]]] = []
    for r in res:
        per.append({row[0]: row[1:] for row in r.get("trace") or []})
    common = sorted(set.intersection(*[set(p) for p in per])) if per and all(per) else []
    if not common:
        return ["trace: none (run with --trace)"]
    out = [f"kernel trace: {len(common)} rounds; run = first block start to last block end, gap = start minus "
           "the previous kernel's end on the same stream (us)"]
    hdr = f"{'kernel':<12}" + "".join(f"{f'r{i} run p50':>12}{'p99':>8}{'gap p50':>9}{'p99':>8}" for i in range(W))
    out.append(hdr)
    for k, name in enumerate(names):
        row, seen = f"{name:<12}", False
        for i in range(W):
            run, gap = [], []
            for rnd in common:
                t = per[i][rnd]
                s0, e0 = t[2 * k], t[2 * k + 1]
                if not s0 or not e0:
                    continue
                seen = True
                run.append((e0 - s0) / 1e3)
                prev = next((t[2 * j + 1] for j in range(k - 1, -1, -1) if t[2 * j + 1]), 0)
                if k == 0 and rnd - 1 in per[i]:  # the route kernel: after the round before
                    prev = per[i][rnd - 1][2 * (len(names) - 1) + 1]
                if prev:
                    gap.append((s0 - prev) / 1e3)
            row += f"{pct(run, 50):>12.1f}{pct(run, 99):>8.1f}{pct(gap, 50):>9.1f}{pct(gap, 99):>8.1f}"
        if seen:
            out.append(row)
    # waits against the peer kernel that raises their flag (same-host flags)
    producers = {"wait_recv": ("pack", 0), "wait_crecv": ("comb_send", 0), "wait_send": ("shuffle", -1)}
    for wname, (pname, back) in producers.items():
        k, pk = names.index(wname), names.index(pname)
        for i in range(W):
            lat = []
            for rnd in common:
                t = per[i][rnd]
                if not t[2 * k + 1]:
                    continue
                ends = [per[j].get(rnd + back, [0] * 20)[2 * pk + 1] for j in range(W) if j != i]
                if ends and all(ends):
                    lat.append((t[2 * k + 1] - max(ends)) / 1e3)
            if lat:
                out.append(f"rank {i}: {wname} ends {pct(lat, 50):.1f} us p50 / {pct(lat, 99):.1f} p99 after the "
                           f"last peer's {pname}{' of the round before' if back else ''} ended")
    # one round (the median by the slowest rank's route-to-combine-end), every rank on one clock
    def span(rnd: int) -> int:
        t0 = min(per[i][rnd][0] for i in range(W) if per[i][rnd][0])
        return max(per[i][rnd][2 * names.index("comb_recv") + 1] for i in range(W)) - t0
    mid = sorted(common, key=span)[len(common) // 2]
    t0 = min(per[i][mid][0] for i in range(W) if per[i][mid][0])
    out.append(f"round {mid} (median span {span(mid) / 1e3:.1f} us), us from its first route start:")
    for i in range(W):
        t = per[i][mid]
        out.append(f"  rank {i}: " + "  ".join(f"{n} {(t[2 * k] - t0) / 1e3:.1f}-{(t[2 * k + 1] - t0) / 1e3:.1f}"
                                              for k, n in enumerate(names) if t[2 * k] and t[2 * k + 1]))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=SHAPES, default="decode")
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--mode", choices=["ipc", "engine", "mixed"], default="ipc")
    ap.add_argument("--provider", default="tcp")
    ap.add_argument("--gpu-wait", default="auto", choices=["auto", "kernel", "stream"])
    ap.add_argument("--iters", type=int, default=1000)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--per-graph", type=int, default=50)
    ap.add_argument("--max-tokens", type=int, help="override the shape's tokens per rank")
    ap.add_argument("--json", help="write every figure here")
    ap.add_argument("--eager", action="store_true", help="launch every round from Python (no CUDA graph)")
    ap.add_argument("--trace", action="store_true", help="the kernels stamp their start and end (XFER_MOE_TRACE=1): "
                    "where a round's time goes")
    ap.add_argument("--sm-percent", type=int, help="each rank's share of the GPU's SMs under MPS "
                    "(CUDA_MPS_ACTIVE_THREAD_PERCENTAGE), e.g. 50 for 2 ranks: as if each had a GPU of its own")
    ap.add_argument("--timeout-ms", type=int, default=10000, help="the round deadline: a stuck round fails "
                    "naming the rank after this")
    a = ap.parse_args()
    if a.trace:
        os.environ["XFER_MOE_TRACE"] = "1"
    if a.sm_percent:
        os.environ["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(a.sm_percent)
    spec: Dict[str, Any] = dict(SHAPES[a.shape], world=a.world, device=a.device, provider=a.provider,
                                gpu_wait=a.gpu_wait, iters=a.iters, warmup=a.warmup, per_graph=a.per_graph,
                                graph=not a.eager, timeout_ms=a.timeout_ms)
    if a.max_tokens:
        spec["max_tokens"] = a.max_tokens
    T, W, K = spec["max_tokens"], a.world, spec["topk"]
    spec["private_tokens"] = min(T, 256)
    if a.shape == "prefill":  # packed rows: never more than every pair of every rank
        spec["layout"] = "packed"
        spec["expert_capacity"] = W * T * K
    if a.mode == "engine" or a.device == "cpu":
        spec["same_host"] = False
        os.environ["XFER_GPU_IPC"] = "0"  # the engine path must go through the NIC (staged)
    elif a.mode == "mixed":
        spec["host_of"] = [r // 2 for r in range(W)]
    if a.device != "cpu":
        import torch

        if not torch.cuda.is_available():
            print(f"no CUDA device here (torch {torch.__version__}): nothing to run on {a.device}")
            return 2
    t0 = time.monotonic()
    res = moe_ranks.run_ranks(W, "moe_bench:bench_rank", spec, timeout=600)
    took = time.monotonic() - t0
    per_rank = []
    for r in res:
        per_rank.append(phases_from_stamps(r["stamps"]) if "stamps" in r else r["us"])
    n = len(per_rank[0]["dispatch"])
    slowest = {p: [max(pr[p][i] for pr in per_rank) for i in range(n)] for p in per_rank[0]}
    print(f"# moe_bench {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}: {a.shape}, {W} ranks, "
          f"device {a.device}, mode {a.mode}, provider {a.provider}, wait {res[0]['wait']}, "
          f"MPS {'on' if res[0].get('mps') else 'off (time-sliced if ranks share a GPU)'}, "
          f"{'CUDA graphs' if res[0].get('graph') else 'eager launches'}, "
          f"{'SMs ' + str(a.sm_percent) + '% per rank, ' if a.sm_percent else ''}"
          f"{''.join(k + '=' + os.environ[k] + ', ' for k in KNOBS if k in os.environ)}"
          f"{spec['max_tokens']} tokens x {spec['hidden']} per rank, top-{K} of {spec['experts']}, fp8 "
          f"dispatch / bf16 combine, {n} rounds, {took:.0f} s in all")
    print(f"{'phase (us)':<16}" + "".join(f"{'rank ' + str(i) + ' p50':>13}{'p99':>9}" for i in range(W))
          + f"{'slowest p50':>13}{'p99':>9}")
    for p in per_rank[0]:
        row = f"{p:<16}"
        for pr in per_rank:
            row += f"{pct(pr[p], 50):>13.1f}{pct(pr[p], 99):>9.1f}"
        row += f"{pct(slowest[p], 50):>13.1f}{pct(slowest[p], 99):>9.1f}"
        print(row)
    for r in res:
        if r.get("graph_error"):
            print(f"rank {r['rank']}: CUDA graph capture failed, timed eagerly: {r['graph_error']}")
    for r in res:
        px = r["proxy"]
        round_us = pct(slowest["dispatch"], 50) + pct(slowest["combine"], 50)
        busy = px["busy_ns"] / max(1, px["rounds"]) / 1e3
        print(f"rank {r['rank']}: proxy busy {busy:.1f} us per round ({px['rounds']} rounds) = "
              f"{100 * busy / round_us if round_us else 0:.1f}% of dispatch+combine p50 ({round_us:.1f} us); "
              f"route seen -> receive flag {px['route_to_recv_ns'] / max(1, px['rounds']) / 1e3:.1f} us; "
              f"remote ranks {r['remote_ranks']}")
    if any("trace" in r for r in res):
        for line in trace_report(res):
            print(line)
    if a.shape in PUBLISHED and a.device != "cpu":
        d50, c50 = pct(slowest["dispatch"], 50), pct(slowest["combine"], 50)
        pub = PUBLISHED[a.shape]
        print(f"ratios to the published EP8 figures (not like for like: see docs/performance.md): "
              f"dispatch {d50 / pub['fabric-lib EP8 dispatch']:.2f}x fabric-lib, "
              f"{d50 / pub['DeepEP EP8 dispatch']:.2f}x DeepEP; combine {c50 / pub['fabric-lib EP8 combine']:.2f}x "
              f"fabric-lib, {c50 / pub['DeepEP EP8 combine']:.2f}x DeepEP")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"spec": spec, "wait": res[0]["wait"], "mps": res[0].get("mps", False), "per_rank": per_rank, "proxy": [r["proxy"] for r in res]}, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
