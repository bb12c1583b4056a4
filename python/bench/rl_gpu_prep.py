#!/usr/bin/env python3
"""Preparation throughputs of an RL weight update on this GPU, for the
simulator (xfer.rl.sim reads the JSON this writes as h200-prep.json).

* ``quant_GBps``: xfer.rl.fp8.quantize (plain torch ops, 128 x 128 blocks) on a
  4096 x 7168 BF16 band (a Kimi-K2 expert's fused gate_up), bytes of BF16
  input per second; the other shapes are listed too;
* ``prep_launch_us``: the same on one 128 x 128 block (the fixed cost per band);
* ``fuse_GBps``: copying two 2048 x 7168 BF16 sources into one fused band;
* ``h2d_GBps``: 256 MiB from pinned host memory (CPU-offloaded shards).

CUDA events around ``--iters`` repetitions after a warm-up; medians of 5 runs.

    python3 python/bench/rl_gpu_prep.py --out OUT/h200-prep.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def timed(torch, fn, iters: int) -> float:
    """Seconds per call (median of 5 runs of ``iters`` calls)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    runs = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(iters):
            fn()
        b.record()
        b.synchronize()
        runs.append(a.elapsed_time(b) / 1000 / iters)
    return statistics.median(runs)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--out")
    a = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("SKIP: torch is not installed")
        return 77
    if not torch.cuda.is_available():
        print("SKIP: CUDA is not available")
        return 77
    from xfer.rl import fp8

    dev = torch.device("cuda")
    res = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "shapes": {}}
    for rows, cols in ((4096, 7168), (7168, 2048), (128, 7168), (2112, 7168), (3072, 4096), (128, 128)):
        x = torch.randn(rows, cols, device=dev).to(torch.bfloat16)
        q = torch.empty(rows, cols, dtype=torch.float8_e4m3fn, device=dev)
        s = torch.empty(-(-rows // 128), -(-cols // 128), dtype=torch.float32, device=dev)
        t = timed(torch, lambda: fp8.quantize(x, 128, out=q, scales_out=s), a.iters)
        res["shapes"][f"{rows}x{cols}"] = {"us": round(t * 1e6, 1), "GBps": round(rows * cols * 2 / t / 1e9, 1)}
    res["quant_GBps"] = res["shapes"]["4096x7168"]["GBps"]
    res["prep_launch_us"] = res["shapes"]["128x128"]["us"]
    g = torch.randn(2048, 7168, device=dev).to(torch.bfloat16)
    u = torch.randn(2048, 7168, device=dev).to(torch.bfloat16)
    band = torch.empty(4096, 7168, dtype=torch.bfloat16, device=dev)

    def fuse():
        band[:2048].copy_(g)
        band[2048:].copy_(u)

    t = timed(torch, fuse, a.iters)
    res["fuse_GBps"] = round(band.numel() * 2 / t / 1e9, 1)
    host = torch.empty(256 << 20, dtype=torch.uint8).pin_memory()
    devbuf = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    t = timed(torch, lambda: devbuf.copy_(host, non_blocking=True), 5)
    res["h2d_GBps"] = round((256 << 20) / t / 1e9, 1)
    res["command"] = "python3 python/bench/rl_gpu_prep.py " + " ".join(sys.argv[1:])
    print(json.dumps(res, indent=1))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
