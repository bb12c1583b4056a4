#!/usr/bin/env python3
"""RL weight-update demo: N trainer and M inference processes on this machine.

The trainers hold a small MoE transformer (xfer.rl.models.SMALL) FSDP-sharded
(HSDP: non-expert parameters sharded within a "node" of ``--node`` ranks,
experts across nodes), gather with torch.distributed (gloo), and write BF16
tensors and FP8 (128 x 128 block scales) tensors straight into the inference
ranks' memory, which is laid out for tensor/expert parallelism with fused
qkv and gate_up. Every step changes every weight; after each step every
inference rank checks every byte of every tensor against a reference built
here: the same deterministic weights, sliced and stacked as the target
says, and quantized block by block with plain torch ops.

    python3 python/bench/rl_demo.py --trainers 4 --node 2 --ranks 2 --steps 3
    python3 python/bench/rl_demo.py --trainers 3 --node 3 --ranks 2 --buffers 1
    python3 python/bench/rl_demo.py --device cuda       # processes share the GPU
    python3 python/bench/rl_demo.py --fault             # kill rank 1 mid-update, replace it
    python3 python/bench/rl_demo.py --device cuda --offload   # shards in host memory (H2D stage)

Exit status 0: every step verified (and, with --fault, the faulty step failed
on every trainer naming the rank, then the replacement worked); 77: torch is
not installed (or no CUDA with --device cuda); 1: a check failed.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import socket
import sys
import time
import zlib
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the xfer package of this tree


# ---------------------------------------------------------------- reference
def weight(name: str, step: int, shape):
    """The full parameter ``name`` after training step ``step``: deterministic,
    rows of different magnitudes, an all-zero 128 x 128 block in the down
    projections on even steps (the scale-1 case of FP8)."""
    import torch

    g = torch.Generator().manual_seed((zlib.crc32(name.encode()) * 1000003 + step * 7919) % (1 << 62))
    x = torch.randn(*shape, generator=g)
    if x.dim() >= 2:
        x = x * torch.logspace(-3, 1, x.shape[0]).view(-1, *([1] * (x.dim() - 1)))
        if name.endswith("down") and step % 2 == 0:
            x[:128, :128] = 0
    return x.to(torch.bfloat16)


def reference_fp8(x, block: int = 128):
    """FP8 e4m3fn values and float32 block scales of 2-D ``x``, one block at a time."""
    import torch

    rows, cols = x.shape
    q = torch.empty(rows, cols, dtype=torch.float8_e4m3fn)
    s = torch.empty(-(-rows // block), -(-cols // block), dtype=torch.float32)
    for i in range(0, rows, block):
        for j in range(0, cols, block):
            b = x[i:i + block, j:j + block].float()
            amax = b.abs().max()
            scale = amax / 448.0 if amax > 0 else torch.tensor(1.0)
            s[i // block, j // block] = scale
            q[i:i + block, j:j + block] = (b / scale).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    return q, s


def expected_target(t, full: Dict[str, Any]):
    """The bytes target ``t`` must hold: its pieces of the full weights, stacked."""
    import torch

    x = torch.empty(t.shape, dtype=torch.bfloat16)
    for p in t.pieces:
        src = full[p.source].reshape(-1, full[p.source].shape[-1]) if full[p.source].dim() > 1 else full[p.source].view(-1, 1)
        x[p.at[0]:p.at[0] + p.height, p.at[1]:p.at[1] + p.width] = src[p.rows[0]:p.rows[1], p.cols[0]:p.cols[1]]
    if t.dtype == "float8_e4m3fn":
        return reference_fp8(x, t.block)
    return x.to(getattr(torch, t.dtype)), None


def _f32_hex(v: float) -> str:
    import struct

    return struct.pack(">f", v).hex()


def _recip_scales(x, block: int = 128):
    """The scales PyTorch's CUDA kernel gives for ``amax / 448.0`` (a host
    scalar divisor): ``amax * (1 / 448)`` in float32. The first GPU run's
    trainers quantized that way; a match names that cause in the log."""
    import torch

    rows, cols = x.shape
    nrb, ncb = -(-rows // block), -(-cols // block)
    xf = torch.nn.functional.pad(x.float(), (0, ncb * block - cols, 0, nrb * block - rows))
    amax = xf.view(nrb, block, ncb, block).abs().amax(dim=(1, 3))
    inv = torch.tensor(1.0) / torch.tensor(448.0)
    return torch.where(amax > 0, amax * inv, torch.ones_like(amax))


def describe_mismatch(t, got, got_s, want, want_s, step: int, shapes) -> str:
    """One line on what differs in target ``t``: how many value bytes and
    scale blocks, the first of each (reference vs received, with the float32
    bits of scales), and what the received bytes look like: all zero (never
    written), the previous step's (stale: counted before the data landed, or
    the wrong buffer), or scales of the multiply-by-reciprocal formula."""
    import torch

    out = [f"{t.name} {t.dtype} {tuple(t.shape)}"]
    gv, wv = got.view(torch.uint8), want.view(torch.uint8)
    dv = (gv != wv).nonzero()
    if len(dv):
        r, c = (int(v) for v in dv[0])
        row_bytes = wv.shape[-1] if wv.dim() > 1 else 1
        out.append(f"values: {len(dv)} of {wv.numel()} bytes differ, first at byte [{r}, {c}]: "
                   f"reference {wv[r, c].item():#04x}, received {gv[r, c].item():#04x}")
        if t.dtype != "float8_e4m3fn" and row_bytes:
            out.append(f"(element {want.view(-1)[(r * row_bytes + c) // want.element_size()].item()!r} vs "
                       f"{got.view(-1)[(r * row_bytes + c) // got.element_size()].item()!r})")
        if not gv.any():
            out.append("received all zero: never written")
        elif step > 0:
            prev = {n: weight(n, step - 1, s) for n, s in shapes.items()}
            pw, _ = expected_target(t, prev)
            if torch.equal(pw.view(torch.uint8), gv):
                out.append("received = step %d's bytes: stale" % (step - 1))
    if want_s is not None:
        ds = (got_s != want_s).nonzero()
        if len(ds):
            i, j = (int(v) for v in ds[0])
            a, b = want_s[i, j].item(), got_s[i, j].item()
            ulp = abs(want_s[i, j].view(torch.int32).item() - got_s[i, j].view(torch.int32).item())
            out.append(f"scales: {len(ds)} of {want_s.numel()} blocks differ, first [{i}, {j}]: reference {a!r} "
                       f"({_f32_hex(a)}), received {b!r} ({_f32_hex(b)}), {ulp} ulp")
            x = torch.empty(t.shape, dtype=torch.bfloat16)
            full = {n: weight(n, step, s) for n, s in shapes.items()}
            for p in t.pieces:
                src = full[p.source].reshape(-1, full[p.source].shape[-1])
                x[p.at[0]:p.at[0] + p.height, p.at[1]:p.at[1] + p.width] = src[p.rows[0]:p.rows[1], p.cols[0]:p.cols[1]]
            if torch.equal(_recip_scales(x, t.block), got_s):
                out.append("received scales = amax * (1/448) in float32 (CUDA's division by a host scalar)")
    return "; ".join(out)


# ---------------------------------------------------------------- processes
def _send(conn, **kw) -> None:
    conn.send_bytes(json.dumps(kw).encode())


def _recv(conn, timeout: float = 120.0) -> Dict[str, Any]:
    if not conn.poll(timeout):
        raise TimeoutError("no answer from a child process")
    return json.loads(conn.recv_bytes())


def _old_quantize(x, block: int = 128, out=None, scales_out=None):
    """xfer.rl.fp8.quantize as the first GPU run computed it on CUDA (scales
    ``amax * (1/448)``), for --old-fp8."""
    from xfer.rl import fp8

    rows, cols = x.shape
    scale = _recip_scales(x, block)
    q = x.float() / scale.repeat_interleave(block, 0).repeat_interleave(block, 1)[:rows, :cols]
    return fp8.store(q.clamp_(-448.0, 448.0), scale, out, scales_out)


def write_path(tr, dev) -> str:
    """How this trainer's WRITEs reach the inference GPUs, for the log."""
    nic = tr.eng.nic_info(0)
    if dev.type != "cuda":
        return f"{nic.provider}: host memory"
    ipc = os.environ.get("XFER_GPU_IPC") != "0"
    return (f"{nic.provider}, gpu_path {nic.gpu_path}: into GPU memory of a peer on this host by "
            + ("CUDA IPC copies (a handle that does not open warns 'cannot open the peer's CUDA IPC handle' "
               "and falls back to staged)" if ipc else "the staged path through host mirrors (XFER_GPU_IPC=0)"))


def trainer_main(conn, rank: int, cfg: Dict[str, Any]) -> None:
    import torch
    import torch.distributed as dist
    from datetime import timedelta

    from xfer.rl import models
    from xfer.rl.gather import TorchGather
    from xfer.rl.schedule import Schedule
    from xfer.rl.trainer import Trainer, local_boxes

    spec = models.MODELS[cfg["model"]]
    if cfg.get("old_fp8"):  # reproduce the first GPU run's quantization on this device (to see the checks fail)
        from xfer.rl import fp8

        fp8.quantize = _old_quantize
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{cfg['port']}", rank=rank,
                            world_size=cfg["trainers"], timeout=timedelta(seconds=60))
    mine = [s for d in models.trainer_shards(spec, cfg["trainers"], cfg["node"]) for s in d.shards() if s.rank == rank]
    conn.send_bytes(json.dumps([s.to_json() for s in mine]).encode())
    boxes = local_boxes(mine, rank)
    dev = torch.device(cfg["device"])
    shapes = {n: s for n, s, _ in spec.params()}
    # --offload: shards in (pinned) host memory, prepared on the GPU (the H2D stage)
    pdev = torch.device("cpu") if cfg.get("offload") else dev
    params = {s.name: torch.zeros((s.rows[1] - s.rows[0]) * (s.cols[1] - s.cols[0]), dtype=torch.bfloat16, device=pdev)
              for s in mine}
    if cfg.get("offload") and dev.type == "cuda":
        params = {k: v.pin_memory() for k, v in params.items()}
    sched = Schedule.from_bytes(conn.recv_bytes())

    def on_task(step, task):
        if step == cfg.get("slow_step"):
            time.sleep(0.01)

    tr = Trainer(sched, rank, params, boxes, gather=TorchGather(sched, rank), pool_bytes=cfg["pool_bytes"],
                 on_task=on_task, device=dev, provider=cfg["provider"], nics=cfg.get("nics"), timeout_ms=30000)
    conn.send_bytes(tr.address)
    trainers = json.loads(conn.recv_bytes())
    inference = json.loads(conn.recv_bytes())
    tr.connect([bytes.fromhex(a) for a in trainers], [(bytes.fromhex(a), [bytes.fromhex(d) for d in ds]) for a, ds in inference])
    _send(conn, ok=True, path=write_path(tr, dev))
    while True:
        cmd = json.loads(conn.recv_bytes())
        if cmd["op"] == "quit":
            tr.close()
            _send(conn, ok=True, high_water=tr.pool.high_water)
            return
        if cmd["op"] == "update":
            step = cmd["step"]
            for name, t in params.items():  # the training step: new values in place
                (r0, r1), (c0, c1) = boxes[name]
                full = weight(name, step, shapes[name])
                full2 = full.reshape(-1, full.shape[-1]) if full.dim() > 1 else full.view(-1, 1)
                t.copy_(full2[r0:r1, c0:c1].reshape(-1))
            if dev.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.monotonic()
            try:
                st = tr.update(step, timeout=cmd.get("timeout", 30))
                _send(conn, ok=True, seconds=time.monotonic() - t0, stages=st)
            except Exception as e:
                failed = getattr(e, "failed", {})
                _send(conn, ok=False, seconds=time.monotonic() - t0, error=str(e), failed=failed,
                      kind=type(e).__name__)
        elif cmd["op"] == "replace":
            ep = json.loads(conn.recv_bytes())
            blob = conn.recv_bytes()
            tr.replace_rank(cmd["rank"], (bytes.fromhex(ep[0]), [bytes.fromhex(d) for d in ep[1]]), blob)
            _send(conn, ok=True, epoch=tr.s.epoch)


def inference_main(conn, rank: int, cfg: Dict[str, Any]) -> None:
    import torch

    from xfer.rl import models, wire
    from xfer.rl.inference import Inference
    from xfer.rl.layout import Placer

    spec = models.MODELS[cfg["model"]]
    targets, nbytes = models.rank_targets(spec, rank, cfg["tp"])
    if cfg.get("shuffle"):  # a replacement that lays its tensors out in another order
        pl = Placer(rank)
        for t in reversed(targets):
            pl.add(t.name, t.shape, t.dtype, t.pieces, t.block)
        targets, nbytes = pl.targets, pl.nbytes
    pauses: List[int] = []
    inf = Inference(rank, targets, nbytes, device=cfg["device"], buffers=cfg["buffers"], provider=cfg["provider"],
                    nics=cfg.get("nics"), on_pause=pauses.append, on_resume=pauses.append)
    conn.send_bytes(json.dumps({"targets": [t.to_json() for t in targets], "nbytes": nbytes,
                                "address": inf.address.hex(), "descriptors": [d.hex() for d in inf.descriptors]}).encode())
    hello = json.loads(conn.recv_bytes())
    inf.connect([bytes.fromhex(a) for a in hello["trainers"]], hello["expected"], hello["first_step"])
    shapes = {n: s for n, s, _ in spec.params()}
    _send(conn, ok=True)
    while True:
        cmd = json.loads(conn.recv_bytes())
        op = cmd["op"]
        if op == "quit":
            inf.close()
            _send(conn, ok=True)
            return
        if op == "begin":
            inf.begin(cmd["step"])
            _send(conn, ok=True)
        elif op == "die_after_first":  # the fault: exit as soon as step's first write from trainer 0 lands
            inf.eng.expect_imm(wire.imm(wire.DATA, cmd["step"], 0), 1, callback=lambda c: os._exit(3))
            _send(conn, ok=True)
        elif op == "wait":
            step = cmd["step"]
            t0 = time.monotonic()
            try:
                inf.wait(step, timeout=cmd.get("timeout", 30))
            except Exception as e:
                _send(conn, ok=False, error=str(e))
                continue
            waited = time.monotonic() - t0
            full = {n: weight(n, step, s) for n, s in shapes.items()}
            bad, detail = [], []
            for t in targets:
                want, want_s = expected_target(t, full)
                got = inf.tensor(t.name).cpu()
                got_s = inf.scales(t.name).cpu() if want_s is not None else None
                if not torch.equal(got.view(torch.uint8), want.view(torch.uint8)):
                    bad.append(t.name)
                elif want_s is not None and not torch.equal(got_s, want_s):
                    bad.append(t.name + " (scales)")
                else:
                    continue
                if len(detail) < 2:  # the first mismatches in full, to debug from the log alone
                    detail.append(describe_mismatch(t, got, got_s, want, want_s, step, shapes))
            _send(conn, ok=not bad, waited=waited, verified=len(targets), bad=bad[:10], nbad=len(bad), active=inf.active,
                  pauses=pauses[-2:], fp8=sum(t.dtype == "float8_e4m3fn" for t in targets), detail=detail)


# ---------------------------------------------------------------- controller
def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Demo:
    def __init__(self, trainers: int, node: int, ranks: int, provider: str, device: str, buffers: int,
                 model: str = "small-moe", slow_step: Optional[int] = None, offload: bool = False,
                 mode: str = "xfer", old_fp8: bool = False, log=print):
        from xfer.rl import layout, plan

        self.log = log
        self.ctx = mp.get_context("forkserver")
        self.ctx.set_forkserver_preload(["torch", "xfer", "xfer.rl", "xfer.rl.trainer", "xfer.rl.inference"])
        self.cfg = {"model": model, "trainers": trainers, "node": node, "tp": ranks, "provider": provider,
                    "nics": "lo" if provider.startswith("tcp") else None, "device": device, "buffers": buffers,
                    "port": free_port(), "pool_bytes": 8 << 20, "slow_step": slow_step, "offload": offload,
                    "old_fp8": old_fp8}
        t0 = time.monotonic()
        self.tconns, self.tprocs = [], []
        for r in range(trainers):
            a, b = self.ctx.Pipe()
            p = self.ctx.Process(target=trainer_main, args=(b, r, self.cfg), daemon=True)
            p.start()
            self.tconns.append(a)
            self.tprocs.append(p)
        self.iconns: List[Any] = [None] * ranks
        self.iprocs: List[Any] = [None] * ranks
        infos = [self._start_inference(j, self.cfg) for j in range(ranks)]
        shards = [layout.Shard.from_json(x) for c in self.tconns for x in json.loads(c.recv_bytes())]
        targets = [layout.Target.from_json(x) for info in infos for x in info["targets"]]
        t1 = time.monotonic()
        self.schedule = plan.build(shards, targets, region_bytes=[i["nbytes"] for i in infos], mode=mode)
        self.plan_seconds = time.monotonic() - t1
        for r, c in enumerate(self.tconns):  # each trainer gets its slice, not the whole schedule
            c.send_bytes(self.schedule.for_trainer(r).to_bytes())
        self.taddrs = [self._bytes(c) for c in self.tconns]
        self.endpoints = [[i["address"], i["descriptors"]] for i in infos]
        # Inference ranks add the trainers first: a peer answers heartbeats
        # only from engines it has added, and their grants wait at the trainers.
        for j in range(ranks):
            self._hello(j, 0)
        for c in self.tconns:
            c.send_bytes(json.dumps([a.hex() for a in self.taddrs]).encode())
            c.send_bytes(json.dumps(self.endpoints).encode())
        paths = set()
        for c in self.tconns:
            r = _recv(c)
            assert r["ok"]
            paths.add(r["path"])
        sm = self.schedule.summary()
        self.log(f"demo: {trainers} trainers (node {node}) -> {ranks} inference ranks on {provider}/{device}, "
                 f"{buffers} buffer(s); schedule in {self.plan_seconds * 1000:.0f} ms: egress per trainer "
                 f"{sm['egress']} B, writes {sm['writes']}, gathers {sm['gathers']}; set-up {time.monotonic() - t0:.1f} s")
        self.log("write path: " + " | ".join(sorted(paths)) + (" (old FP8 formula: --old-fp8)" if old_fp8 else ""))

    def _bytes(self, c) -> bytes:
        if not c.poll(120):
            raise TimeoutError("trainer did not send its address")
        return c.recv_bytes()

    def _start_inference(self, j: int, cfg: Dict[str, Any]) -> Dict[str, Any]:
        a, b = self.ctx.Pipe()
        p = self.ctx.Process(target=inference_main, args=(b, j, cfg), daemon=True)
        p.start()
        self.iconns[j], self.iprocs[j] = a, p
        return _recv(a)

    def _hello(self, j: int, first_step: int) -> None:
        c = self.iconns[j]
        c.send_bytes(json.dumps({"trainers": [a.hex() for a in self.taddrs],
                                 "expected": self.schedule.expected[j], "first_step": first_step}).encode())
        assert _recv(c)["ok"]

    def step(self, step: int, expect_fail: Optional[int] = None) -> Dict[str, Any]:
        live = [j for j in range(len(self.iconns)) if self.iprocs[j].is_alive()]
        if self.cfg["buffers"] == 1:
            for j in live:
                _send(self.iconns[j], op="begin", step=step)
            for j in live:
                assert _recv(self.iconns[j])["ok"]
        t0 = time.monotonic()
        for c in self.tconns:
            _send(c, op="update", step=step, timeout=20)
        for j in live:
            if j != expect_fail:
                _send(self.iconns[j], op="wait", step=step, timeout=30)
        tres = [_recv(c) for c in self.tconns]
        ires = {j: _recv(self.iconns[j]) for j in live if j != expect_fail}
        return {"trainers": tres, "inference": ires, "seconds": time.monotonic() - t0}

    def kill_mid_update(self, j: int, step: int) -> None:
        _send(self.iconns[j], op="die_after_first", step=step)
        assert _recv(self.iconns[j])["ok"]

    def replace(self, j: int, first_step: int) -> int:
        """A new process for inference rank j (its tensors in another order);
        the schedule patched for it; returns how many destinations changed."""
        from xfer.rl import layout

        self.iprocs[j].join(10)
        info = self._start_inference(j, {**self.cfg, "shuffle": True})
        targets = [layout.Target.from_json(x) for x in info["targets"]]
        patched, changed = self.schedule.retarget(j, targets, info["nbytes"])
        self.schedule = patched
        for r, c in enumerate(self.tconns):
            _send(c, op="replace", rank=j)
            c.send_bytes(json.dumps([info["address"], info["descriptors"]]).encode())
            c.send_bytes(patched.for_trainer(r).to_bytes())
        for c in self.tconns:
            assert _recv(c)["ok"]
        self._hello(j, first_step)
        return changed

    def close(self) -> None:
        for c, p in list(zip(self.tconns, self.tprocs)) + list(zip(self.iconns, self.iprocs)):
            if p is not None and p.is_alive():
                try:
                    _send(c, op="quit")
                    _recv(c, 20)
                except Exception:
                    pass
        for p in self.tprocs + self.iprocs:
            if p is not None:
                p.join(10)
                if p.is_alive():
                    p.kill()


def _mismatch(r: Dict[str, Any]) -> str:
    more = r["nbad"] - len(r["bad"])
    return (f"{r['nbad']} of {r['verified']} tensors differ (values, or '(scales)' where only those do): "
            + ", ".join(r["bad"]) + (f" and {more} more" if more > 0 else "")
            + "".join(f"\n    first: {d}" for d in r.get("detail", [])))


def check_step(res: Dict[str, Any], step: int, log=print) -> List[str]:
    """Problems of a step that should have worked (empty: verified)."""
    probs = []
    for t, r in enumerate(res["trainers"]):
        if not r["ok"]:
            probs.append(f"trainer {t}: {r['error']}")
    for j, r in res["inference"].items():
        if not r.get("ok"):
            probs.append(f"inference {j}: {r.get('error') or _mismatch(r)}")
    if not probs:
        ver = sum(r["verified"] for r in res["inference"].values())
        f8 = sum(r["fp8"] for r in res["inference"].values())
        slowest = max(r["seconds"] for r in res["trainers"])
        log(f"step {step}: {ver} tensors verified bit-exact ({f8} FP8 with scales) on "
            f"{len(res['inference'])} ranks; slowest trainer update {slowest * 1000:.0f} ms")
    return probs


def run(args) -> int:
    try:
        import torch
    except ImportError:
        print("SKIP: torch is not installed (the RL demo needs torch)")
        return 77
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("SKIP: --device cuda but CUDA is not available here")
        return 77
    demo = Demo(args.trainers, args.node, args.ranks, args.provider, args.device, args.buffers,
                slow_step=1 if args.fault else None, offload=args.offload, mode=args.mode, old_fp8=args.old_fp8)
    probs: List[str] = []
    try:
        if not args.fault:
            for s in range(args.steps):
                probs += check_step(demo.step(s), s)
        else:
            probs += check_step(demo.step(0), 0)
            demo.kill_mid_update(1, 1)
            res = demo.step(1, expect_fail=1)
            for t, r in enumerate(res["trainers"]):
                if r["ok"] or "inference 1" not in r.get("failed", {}):
                    probs.append(f"trainer {t}: step 1 should fail naming inference 1, got {r}")
            slowest = max(r["seconds"] for r in res["trainers"])
            print(f"step 1 (rank 1 killed mid-update): every trainer failed naming inference 1 within "
                  f"{slowest:.2f} s (deadline 20 s): {res['trainers'][0].get('error', '')[:160]}")
            if slowest > 20:
                probs.append(f"failure took {slowest:.1f} s, past the deadline")
            for j, r in res["inference"].items():
                if not r.get("ok"):
                    probs.append(f"inference {j} (alive) should have received step 1: {r}")
            changed = demo.replace(1, 2)
            print(f"rank 1 replaced (new process, new engine, tensors laid out in reverse order): "
                  f"{changed} destination entries re-targeted, schedule epoch {demo.schedule.epoch}")
            for s in (2, 3):
                probs += check_step(demo.step(s), s)
    finally:
        demo.close()
    for p in probs:
        print("FAIL:", p)
    print("rl_demo:", "FAILED" if probs else "all steps verified")
    return 1 if probs else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trainers", type=int, default=4)
    ap.add_argument("--node", type=int, default=2, help="trainer ranks per node (non-expert FSDP mesh)")
    ap.add_argument("--ranks", type=int, default=2, help="inference ranks (one tensor/expert-parallel instance)")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--provider", default="tcp")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--buffers", type=int, default=2, choices=(1, 2))
    ap.add_argument("--fault", action="store_true", help="kill inference rank 1 mid-update, then replace it")
    ap.add_argument("--mode", default="xfer", choices=("xfer", "published"),
                    help="planner mode (published: full_tensor() all-gathers, sends from the full tensors)")
    ap.add_argument("--offload", action="store_true", help="trainer shards in host memory, prepared on --device (H2D)")
    ap.add_argument("--old-fp8", action="store_true",
                    help="trainers quantize as the first GPU run did on CUDA (scales amax * (1/448)): the checks must fail")
    return run(ap.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
