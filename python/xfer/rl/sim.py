"""Update-time simulator: the real schedule at full scale, a stated cost model.

For a model (shapes from its published config), a trainer cluster (HSDP
layout of :mod:`xfer.rl.models`), an inference cluster (data-parallel
instances of ``tp`` ranks, FP8) and per-GPU link speeds, it builds the
schedule with :func:`xfer.rl.plan.build` and walks every rank's tasks:

* each trainer rank's host thread runs its tasks one after another (as
  :class:`xfer.rl.trainer.Trainer` does): H2D of offloaded shards, gathers
  (bytes in over NVLink inside a node or the NIC across nodes, plus a fixed
  latency per collective), fusion (the band's bytes copied once), FP8
  quantization (throughput on the source bytes plus a launch cost per band)
  and WRITE submissions (a cost per call);
* meanwhile the NICs move the bytes: per mesh group the network time is that
  of the busiest endpoint (trainer egress, trainer ingress from cross-node
  gathers, inference ingress) at the achievable rate; a non-blocking fabric
  is assumed;
* a group ends when both are done, plus the drain of the slowest rank's last
  WRITEs, plus a barrier; the update is the sum over groups plus the final
  status exchange.

Baselines: "rank-0 broadcast" (every byte gathered to trainer rank 0,
quantized there, broadcast once to the inference side: bounded by rank 0's
NIC) and "ring" (owners broadcast their parts; every inference GPU receives
the whole model once, as in broadcast-based systems).

Inputs are :class:`Inputs`; each says where its value comes from. Measured
values are read from JSON files when present (``engine-costs.json`` from
python/bench/rl_engine_costs.py, ``h200-prep.json`` from
python/bench/rl_gpu_prep.py via scripts/device-rl.sh).

    python3 -m xfer.rl.sim --table           # the three models
    python3 -m xfer.rl.sim --plot out.png    # time vs cluster size and NIC speed
"""
from __future__ import annotations

import argparse
import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import models, plan
from .layout import esize

HBM_BYTES = 141e9  # H200


@dataclass
class Inputs:
    nic_gbps: float = 400.0          # per GPU, line rate
    nic_efficiency: float = 0.90     # achievable fraction of line rate for large WRITEs
    nvlink_GBps: float = 360.0       # per GPU, gather inside a node
    h2d_GBps: float = 50.0           # pinned host -> H200
    quant_GBps: float = 200.0        # FP8 block quantization, bytes of BF16 input per second
    fuse_GBps: float = 1000.0        # device copy of a band into the staging buffer, bytes per second
    prep_launch_us: float = 40.0     # fixed cost per prepared band (kernel launches, stream sync)
    gather_latency_us: float = 30.0  # fixed cost per gather collective
    submit_us: float = 5.0           # host cost of one WRITE submission (Python binding)
    barrier_us: float = 100.0        # one barrier / status exchange among trainers
    offload: bool = False            # shards in host memory (CPU-offloaded FSDP): H2D before preparation
    source: Dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        defaults = {
            "nic_gbps": "scenario", "nic_efficiency": "assumed (fabric-lib reports ~400 Gbit/s class peaks on 400 Gbit/s NICs)",
            "nvlink_GBps": "assumed (H200 NVLink 450 GB/s per direction, 80 %)",
            "h2d_GBps": "assumed (PCIe Gen5 x16)", "quant_GBps": "assumed", "fuse_GBps": "assumed",
            "prep_launch_us": "assumed", "gather_latency_us": "assumed (NCCL small-message latency)",
            "submit_us": "assumed", "barrier_us": "assumed", "offload": "scenario"}
        for k, v in defaults.items():
            self.source.setdefault(k, v)

    @property
    def nic_Bps(self) -> float:
        return self.nic_gbps * 1e9 / 8 * self.nic_efficiency

    def load(self, directory: str) -> "Inputs":
        """Measured values from ``directory`` where the files exist."""
        eng = os.path.join(directory, "engine-costs.json")
        if os.path.exists(eng):
            with open(eng) as f:
                d = json.load(f)
            self.submit_us = float(d["submit_us_p50"])
            at = ", ".join(x for x in (d.get("machine", ""), d.get("provider", ""),
                                       f"commit {d['commit']}" if "commit" in d else "",
                                       f"load {d['loadavg_1min'][0]}" if "loadavg_1min" in d else "") if x)
            self.source["submit_us"] = f"measured: {os.path.basename(eng)} ({at})"
            if "barrier_us_p50" in d:
                self.barrier_us = float(d["barrier_us_p50"])
                self.source["barrier_us"] = f"measured: {os.path.basename(eng)} (two engines in one process, {at})"
        gpu = os.path.join(directory, "h200-prep.json")
        if os.path.exists(gpu):
            with open(gpu) as f:
                d = json.load(f)
            for k in ("quant_GBps", "fuse_GBps", "h2d_GBps", "prep_launch_us"):
                if k in d:
                    setattr(self, k, float(d[k]))
                    self.source[k] = f"measured: {os.path.basename(gpu)} ({d.get('device', 'GPU')})"
        return self


@dataclass
class Scenario:
    model: str
    trainers: int
    ranks: int
    tp: int = 0  # inference instance size; 0: the smallest power of two holding FP8 weights in half of HBM
    node: int = 8
    experts: str = "node"  # trainer layout of routed experts (models.trainer_shards; EXPERTS below)
    attention: str = "tp"  # inference layout of the rest (models.ATTENTION_LAYOUTS)

    def instance(self, spec: models.ModelSpec) -> int:
        if self.tp:
            return self.tp
        need = spec.count()[0] / (0.5 * HBM_BYTES)  # FP8: one byte per parameter
        return 1 << max(0, math.ceil(math.log2(need)))


def build(sc: Scenario, mode: str = "xfer"):
    spec = models.MODELS[sc.model]
    tp = sc.instance(spec)
    if sc.ranks % tp:
        raise ValueError(f"{sc.ranks} inference ranks are not whole instances of {tp}")
    sh = models.trainer_shards(spec, sc.trainers, sc.node, experts=sc.experts)
    tg, sizes = models.inference_targets(spec, sc.ranks // tp, tp, attention=sc.attention)
    t0 = time.process_time()
    s = plan.build(sh, tg, region_bytes=sizes, mode=mode, validate=False)
    return s, time.process_time() - t0, tp


STAGES = ("h2d", "gather", "fuse", "quantize", "submit")


def simulate(s, inp: Inputs, node: int = 8) -> Dict[str, Any]:
    T, M = s.trainers, s.ranks
    bw = inp.nic_Bps
    total = 0.0
    groups = []
    crit = {k: 0.0 for k in STAGES + ("wait", "barrier")}
    busy_all = [0.0] * T
    floor = 0.0  # every inference GPU's bytes through its own NIC: no plan can beat it
    for gi in range(len(s.groups)):
        st = {k: [0.0] * T for k in STAGES}
        out_b, in_b = [0] * T, [0] * T
        ing = [0] * M
        last = [0] * T
        gathered = set()  # (param, rank): the full tensor is on that rank's GPU after a gather
        for m, tasks in s.gathers[gi].items():  # collectives: once per mesh, every member takes part
            mesh = s.meshes[m]
            cross = len({r // node for r in mesh}) > 1
            for task in tasks:
                _, _, name, _, root = task
                rows, cols, dt = s.params[name]
                full = rows * cols * esize(dt)
                own = full / len(mesh)  # even shards (exact for torch.chunk up to the last rank)
                for r in mesh:
                    st["gather"][r] += inp.gather_latency_us * 1e-6
                    if inp.offload:  # the shard goes to the GPU before the collective reads it
                        st["h2d"][r] += own / (inp.h2d_GBps * 1e9)
                receivers = mesh if root == -1 else (root,)
                for r in receivers:
                    gathered.add((name, r))
                    if cross:
                        in_b[r] += full - own
                    else:
                        st["gather"][r] += (full - own) / (inp.nvlink_GBps * 1e9)
                if cross:
                    for r in mesh:
                        out_b[r] += own * (len(receivers) - (1 if r in receivers else 0))
        for t in range(T):
            for task in s.programs[t][gi]:
                kind = task[0]
                if kind == "copy":
                    _, _, name, full, so, ss, rows, rb, dests = task
                    n = rows * rb
                    st["submit"][t] += inp.submit_us * 1e-6 * len(dests)
                    for d in dests:
                        ing[d[0]] += n
                    out_b[t] += n * len(dests)
                    last[t] = n * len(dests)
                else:
                    _, _, ci, r0, r1, dests = task
                    ct = s.contents[ci]
                    src_es = max(esize(s.params[p.source][2]) for p in ct.pieces)
                    elems = (r1 - r0) * ct.shape[1]
                    st["fuse"][t] += elems * src_es / (inp.fuse_GBps * 1e9)
                    if ct.fp8:
                        st["quantize"][t] += elems * src_es / (inp.quant_GBps * 1e9) + inp.prep_launch_us * 1e-6
                    else:
                        st["fuse"][t] += inp.prep_launch_us * 1e-6
                    if inp.offload:  # the band's rows of sources that were not gathered here (copies
                        # and gathered tensors need none: WRITEs read host memory directly)
                        for pc in ct.pieces:
                            if (pc.source, t) not in gathered:
                                a, b = max(r0, pc.at[0]), min(r1, pc.at[0] + pc.height)
                                if a < b:
                                    st["h2d"][t] += (b - a) * pc.width * esize(s.params[pc.source][2]) / (inp.h2d_GBps * 1e9)
                    n = elems * esize(ct.dtype)
                    if ct.fp8:
                        b = ct.block
                        n += (-(-r1 // b) - r0 // b) * (-(-ct.shape[1] // b)) * 4
                    k = 2 if ct.fp8 else 1
                    st["submit"][t] += inp.submit_us * 1e-6 * len(dests) * k
                    for d in dests:
                        ing[d[0]] += n
                    out_b[t] += n * len(dests)
                    last[t] = n * len(dests)
        busy = [sum(st[k][t] for k in STAGES) for t in range(T)]
        net = max(max(out_b) / bw, max(in_b) / bw, max(ing) / bw)
        finish = [max(busy[t] + last[t] / bw, net) for t in range(T)]
        g_time = max(finish) + inp.barrier_us * 1e-6
        slow = max(range(T), key=lambda t: busy[t])
        for k in STAGES:
            crit[k] += st[k][slow]
        crit["barrier"] += inp.barrier_us * 1e-6
        crit["wait"] += g_time - busy[slow] - inp.barrier_us * 1e-6
        for t in range(T):
            busy_all[t] += busy[t]
        floor += max(ing) / bw
        groups.append({"group": s.groups[gi], "seconds": g_time, "network_s": net, "busiest_rank_s": max(busy),
                       "max_trainer_egress_GB": max(out_b) / 1e9, "max_inference_ingress_GB": max(ing) / 1e9,
                       "max_trainer_ingress_GB": max(in_b) / 1e9})
        total += g_time
    total += inp.barrier_us * 1e-6  # the final status exchange
    crit["barrier"] += inp.barrier_us * 1e-6
    return {"seconds": total, "breakdown": crit, "groups": groups, "ingress_floor_s": floor}


def baselines(s, inp: Inputs, node: int = 8) -> Dict[str, float]:
    """Rank-0 broadcast and ring times for the same model and clusters."""
    bw = inp.nic_Bps
    # the FP8 model once: every distinct target content (an instance holds them all)
    model_out = 0
    seen = set()
    for ts in s.targets:
        for t in ts:
            k = t.content()
            if k not in seen:
                seen.add(k)
                model_out += t.nbytes + t.scale_nbytes
    bf16 = sum(r * c * esize(dt) for r, c, dt in s.params.values())
    local = bf16 * min(1.0, node / s.trainers)  # what rank 0's node already holds (HSDP: its replica)
    gather_in = (bf16 - local) / bw
    quant = bf16 / (inp.quant_GBps * 1e9)
    bcast = model_out / bw  # the root sends every byte once (tree/ring pipelining)
    rank0 = max(gather_in, quant, bcast) + inp.barrier_us * 1e-6
    ring = model_out / bw + inp.barrier_us * 1e-6  # every inference GPU receives the whole model once
    return {"rank0_s": rank0, "ring_s": ring, "model_fp8_GB": model_out / 1e9, "model_bf16_GB": bf16 / 1e9}


#: The table's layout rule (docs/rl.md): routed experts expert-parallel across
#: nodes, FSDP within the node; everything else FSDP within the node.
EXPERTS = "node"
DEFAULTS = [Scenario("Kimi-K2", 256, 128, experts=EXPERTS), Scenario("DeepSeek-V3", 256, 128, experts=EXPERTS),
            Scenario("Qwen3-235B-A22B", 128, 32, experts=EXPERTS)]
PUBLISHED = {"Kimi-K2": 1.3, "Qwen3-235B-A22B": 2.0}
#: The published per-rank breakdown of Kimi-K2 256 -> 128 (ms; fabric-lib
#: paper / le.qun.ch 2025-09-17), in this simulator's stage names.
PUBLISHED_KIMI_MS = {"h2d": 184, "gather": 518, "fuse": 18, "quantize": 88, "submit": 26, "wait": 357 + 42, "total": 1233}


#: Qwen3-235B-A22B as the first write-up (le.qun.ch, 2025-09-07) states its
#: setup (docs/rl.md, "Qwen3-235B in its published setup"): 128 trainers, 32
#: inference GPUs that each receive 37.688 GB (its schedule figure): 4
#: instances of 8 GPUs with data-parallel attention and the experts split 8
#: ways; routed experts FSDP-sharded across trainer nodes ("along the RDMA
#: dimension", the follow-up of 2025-09-17).
STATED_QWEN3 = Scenario("Qwen3-235B-A22B", 128, 32, tp=8, experts="across", attention="dp")
#: Its measured link: 16.133 GB written in 0.441 s (36.6 GB/s) over one
#: GPU's 400 Gbit/s (the write-up's "400 Gbps (~50 GB/s) link").
STATED_LINK_GBps = 16.133 / 0.441
#: Its figures: the headline "2 seconds", and 1.69-1.70 s in its timing figure.
STATED_FIGURES = (2.0, 1.70)


def stated(inp: Inputs) -> List[Dict[str, Any]]:
    """Both plans on STATED_QWEN3, at the inputs' NIC rate and at the
    write-up's measured link rate."""
    rates = [("assumed: %.0f %% of %.0f Gbit/s" % (inp.nic_efficiency * 100, inp.nic_gbps), inp.nic_efficiency),
             ("measured in the write-up: %.1f GB/s" % STATED_LINK_GBps, STATED_LINK_GBps / (inp.nic_gbps / 8))]
    rows = []
    for mode in ("xfer", "published"):
        s, secs, tp = build(STATED_QWEN3, mode)
        per_gpu = max(s.summary()["ingress"]) / 1e9
        for label, eff in rates:
            i2 = Inputs(**{**asdict(inp), "nic_efficiency": eff})
            r = simulate(s, i2, STATED_QWEN3.node)
            rows.append({"mode": mode, "link": label, "link_GBps": i2.nic_Bps / 1e9, "schedule_cpu_s": secs,
                         "ingress_GB": per_gpu,
                         "trainer_in_GB": max(g["max_trainer_ingress_GB"] for g in r["groups"]), **r})
        del s
    return rows


def stated_markdown(rows: List[Dict[str, Any]]) -> str:
    ms = lambda x: f"{x * 1000:.1f} ms" if x < 0.01 else f"{x * 1000:.0f} ms"  # noqa: E731
    sc = STATED_QWEN3
    out = [f"Qwen3-235B-A22B in its published setup: {sc.trainers} → {sc.ranks} ({sc.ranks // sc.tp} × {sc.tp}, "
           "data-parallel attention, experts split over the instance), routed experts FSDP across trainer nodes:", "",
           "| plan | link per GPU | predicted | per inference GPU | busiest trainer NIC in (gathers) | H2D | full tensor | "
           "fuse | quantize | RDMA submit | wait | vs 2 s | vs 1.70 s |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        b = r["breakdown"]
        a, f = STATED_FIGURES
        out.append(f"| {'xfer' if r['mode'] == 'xfer' else 'published design'} | {r['link']} | **{r['seconds']:.2f} s** | "
                   f"{r['ingress_GB']:.3f} GB | {r['trainer_in_GB']:.1f} GB | {ms(b['h2d'])} | {ms(b['gather'])} | "
                   f"{ms(b['fuse'])} | {ms(b['quantize'])} | {ms(b['submit'])} | {ms(b['wait'])} | "
                   f"{(r['seconds'] / a - 1) * 100:+.0f} % | {(r['seconds'] / f - 1) * 100:+.0f} % |")
    return "\n".join(out)


def table(inp: Inputs, scenarios: Sequence[Scenario] = DEFAULTS, modes=("xfer", "published")) -> List[Dict[str, Any]]:
    rows = []
    for sc in scenarios:
        row: Dict[str, Any] = {"model": sc.model, "trainers": sc.trainers, "ranks": sc.ranks, "experts": sc.experts}
        for mode in modes:
            s, secs, tp = build(sc, mode)
            r = simulate(s, inp, sc.node)
            row["tp"] = tp
            row[mode] = r
            row[f"{mode}_schedule_cpu_s"] = secs
            if mode == "xfer":
                row.update(baselines(s, inp, sc.node))
                sm = s.summary()
                row["writes_per_trainer_max"] = max(sm["writes"])
                row["gathers_per_trainer_max"] = max(sm["gathers"])
                eg = sm["egress"]
                row["egress_spread"] = max(eg) / (sum(eg) / len(eg)) if sum(eg) else 1.0
            del s
        rows.append(row)
    return rows


def markdown(rows: List[Dict[str, Any]], inp: Inputs) -> str:
    out = ["| model | trainers → inference (instances × GPUs) | predicted, xfer plan | H2D | full tensor | fuse | quantize | RDMA submit | wait | barrier | predicted, published design on the same layouts | rank-0 broadcast | ring | published figure (ours vs it) | schedule build (1 core) |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        b = r["xfer"]["breakdown"]
        ms = lambda x: f"{x * 1000:.1f} ms" if x < 0.01 else f"{x * 1000:.0f} ms"  # noqa: E731
        pub = PUBLISHED.get(r["model"])
        pubs = f"{pub:.1f} s ({(r['xfer']['seconds'] / pub - 1) * 100:+.0f} %)" if pub else "—"
        out.append(f"| {r['model']} | {r['trainers']} → {r['ranks']} ({r['ranks'] // r['tp']} × {r['tp']}) | "
                   f"**{r['xfer']['seconds']:.2f} s** | {ms(b['h2d'])} | {ms(b['gather'])} | {ms(b['fuse'])} | "
                   f"{ms(b['quantize'])} | {ms(b['submit'])} | {ms(b['wait'])} | {ms(b['barrier'])} | "
                   f"{r['published']['seconds']:.2f} s | {r['rank0_s']:.1f} s | {r['ring_s']:.1f} s | {pubs} | "
                   f"{r['xfer_schedule_cpu_s']:.1f} s |")
    if rows and "published" in rows[0]:
        out += ["", "The published design's plan on the same layouts (busiest trainer's host stages; wait = the rest):", "",
                "| model | predicted | ingress floor | H2D | full tensor | fuse | quantize | RDMA submit | wait | barrier | published figure (it vs that) |",
                "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            p = r["published"]
            b = p["breakdown"]
            ms = lambda x: f"{x * 1000:.1f} ms" if x < 0.01 else f"{x * 1000:.0f} ms"  # noqa: E731
            pub = PUBLISHED.get(r["model"])
            pubs = f"{pub:.1f} s ({(p['seconds'] / pub - 1) * 100:+.0f} %)" if pub else "—"
            out.append(f"| {r['model']} | **{p['seconds']:.2f} s** | {p.get('ingress_floor_s', 0):.2f} s | {ms(b['h2d'])} | "
                       f"{ms(b['gather'])} | {ms(b['fuse'])} | {ms(b['quantize'])} | {ms(b['submit'])} | {ms(b['wait'])} | "
                       f"{ms(b['barrier'])} | {pubs} |")
        k = PUBLISHED_KIMI_MS
        out.append(f"| Kimi-K2, published per-rank breakdown | **{k['total'] / 1000:.2f} s** | | {k['h2d']} ms | {k['gather']} ms | "
                   f"{k['fuse']} ms | {k['quantize']} ms | {k['submit']} ms | {k['wait']} ms (waiting 357 + remaining 42) | | |")
    out.append("")
    experts = {r.get("experts", "across") for r in rows}
    out.append("Trainer layout: non-expert parameters FSDP within each node (a replica per node); routed experts "
               + ("expert-parallel across nodes, whole experts per node, FSDP within the node" if experts == {"node"}
                  else "FSDP across nodes (the ranks of one local index)" if experts == {"across"} else str(experts))
               + ". Inference: instances of the smallest power of two GPUs holding the FP8 weights in half of HBM.")
    out.append("")
    out.append(f"Inputs ({inp.nic_gbps:.0f} Gbit/s per GPU):")
    for k, v in asdict(inp).items():
        if k != "source":
            out.append(f"- `{k}` = {v}: {inp.source.get(k, '')}")
    return "\n".join(out)


def sweep(inp: Inputs, model: str, sizes: Sequence[Tuple[int, int]], gbps: Sequence[float],
          experts: str = EXPERTS) -> Dict[str, Any]:
    res: Dict[str, Any] = {"model": model, "gbps": list(gbps), "sizes": [list(x) for x in sizes], "xfer": [], "rank0": [], "ring": [],
                           "experts": experts}
    for T, M in sizes:
        s, _, _ = build(Scenario(model, T, M, experts=experts))
        row, r0, rg = [], [], []
        for g in gbps:
            i2 = Inputs(**{**asdict(inp), "nic_gbps": g})
            row.append(simulate(s, i2)["seconds"])
            b = baselines(s, i2)
            r0.append(b["rank0_s"])
            rg.append(b["ring_s"])
        res["xfer"].append(row)
        res["rank0"].append(r0)
        res["ring"].append(rg)
        del s
    return res


def plot(sw: Dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.6))
    for (T, M), row in zip(sw["sizes"], sw["xfer"]):
        a.plot(sw["gbps"], row, marker="o", label=f"xfer plan {T}→{M}")
    a.plot(sw["gbps"], sw["ring"][0], "k--", label="ring broadcast (any size)")
    a.set_xlabel("NIC line rate per GPU (Gbit/s)")
    a.set_ylabel("predicted update time (s)")
    a.set_yscale("log")
    a.set_title(f"{sw['model']}: update time vs NIC speed")
    a.grid(True, which="both", alpha=0.3)
    a.legend(fontsize=8)
    i400 = sw["gbps"].index(400) if 400 in sw["gbps"] else len(sw["gbps"]) // 2
    xs = [T for T, _ in sw["sizes"]]
    b.plot(xs, [r[i400] for r in sw["xfer"]], marker="o", label="xfer plan (point-to-point)")
    b.plot(xs, [r[i400] for r in sw["rank0"]], marker="s", label="rank-0 broadcast")
    b.plot(xs, [r[i400] for r in sw["ring"]], marker="^", label="ring broadcast")
    b.set_xscale("log", base=2)
    b.set_yscale("log")
    b.set_xlabel("trainer GPUs (inference GPUs = half)")
    b.set_ylabel("predicted update time (s)")
    b.set_title(f"{sw['model']} at {sw['gbps'][i400]:.0f} Gbit/s per GPU")
    b.grid(True, which="both", alpha=0.3)
    b.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description="RL weight-update simulator")
    ap.add_argument("--measured", default=os.path.join(os.path.dirname(__file__), "..", "..", "..", "docs", "rl"),
                    help="directory with engine-costs.json / h200-prep.json")
    ap.add_argument("--gbps", type=float, default=400.0)
    ap.add_argument("--offload", action="store_true", help="CPU-offloaded FSDP shards (adds the H2D stage)")
    ap.add_argument("--experts", default=EXPERTS, choices=models.EXPERT_LAYOUTS,
                    help="trainer layout of routed experts (models.trainer_shards)")
    ap.add_argument("--table", action="store_true")
    ap.add_argument("--json", help="write the table's numbers here")
    ap.add_argument("--render", help="print the table of a --json file again (no computation)")
    ap.add_argument("--plot", help="PNG: Kimi-K2 update time vs cluster size and NIC speed")
    ap.add_argument("--schedule-time", action="store_true", help="only build Kimi-K2 256 -> 128 and report its time")
    a = ap.parse_args(argv)
    inp = Inputs(nic_gbps=a.gbps, offload=a.offload).load(os.path.abspath(a.measured))
    if a.schedule_time:
        s, secs, tp = build(Scenario("Kimi-K2", 256, 128, experts=a.experts))
        print(f"Kimi-K2 256 -> 128 ({128 // tp} x {tp}): schedule built in {secs:.2f} s of CPU time on one core")
        return 0
    if a.render:
        with open(a.render) as f:
            d = json.load(f)
        print(markdown(d["rows"], Inputs(**d["inputs"])))
        if d.get("stated"):
            print("\n" + stated_markdown(d["stated"]))
        return 0
    if a.table or a.json:
        rows = table(inp, [Scenario(sc.model, sc.trainers, sc.ranks, sc.tp, sc.node, a.experts) for sc in DEFAULTS])
        print(markdown(rows, inp))
        st = stated(inp)
        print("\n" + stated_markdown(st))
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"inputs": asdict(inp), "rows": rows, "stated": st}, f, indent=1, default=float)
    if a.plot:
        sw = sweep(inp, "Kimi-K2", [(64, 32), (128, 64), (256, 128), (512, 256)], [100, 200, 400, 800], a.experts)
        plot(sw, a.plot)
        with open(os.path.splitext(a.plot)[0] + ".json", "w") as f:
            json.dump(sw, f, indent=1)
        print(f"wrote {a.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
