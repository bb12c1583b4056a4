#!/usr/bin/env python3
"""FP8 quantization on the GPU against the CPU, bit for bit (the first GPU
run's demo failures came from here).

For the demo model's fused FP8 targets at several steps and a few large
random matrices, xfer.rl.fp8.quantize on CUDA must give the same bytes and
scales as on the CPU (where tests/test_rl_plan.py checks it against a
block-by-block reference). For contrast it also counts how many of the same
tensors the formula of the first run (``amax / 448.0``: on CUDA a multiply by
the reciprocal) gets wrong, so that the log shows the cause on this GPU.

    python3 python/bench/rl_fp8_check.py        # exit 0: identical; 1: a difference; 77: no CUDA
    python3 python/bench/rl_fp8_check.py --device cpu   # the script itself, against itself (no GPU)
"""
from __future__ import annotations

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)


def old_scales(torch, x, block=128):
    rows, cols = x.shape
    nrb, ncb = -(-rows // block), -(-cols // block)
    xf = torch.nn.functional.pad(x.float(), (0, ncb * block - cols, 0, nrb * block - rows))
    amax = xf.view(nrb, block, ncb, block).abs().amax(dim=(1, 3))
    return torch.where(amax > 0, amax / 448.0, torch.ones_like(amax))


def main() -> int:
    dev = sys.argv[sys.argv.index("--device") + 1] if "--device" in sys.argv else "cuda"
    try:
        import torch
    except ImportError:
        print("SKIP: torch is not installed")
        return 77
    if dev == "cuda" and not torch.cuda.is_available():
        print("SKIP: CUDA is not available")
        return 77
    import rl_demo
    from xfer.rl import fp8, models

    t0 = time.monotonic()
    spec = models.SMALL
    shapes = {n: s for n, s, _ in spec.params()}
    cases = []
    for step in range(3):
        full = {n: rl_demo.weight(n, step, s) for n, s in shapes.items()}
        for rank in range(2):
            targets, _ = models.rank_targets(spec, rank, 2)
            for t in targets:
                if t.dtype != "float8_e4m3fn":
                    continue
                x = torch.empty(t.shape, dtype=torch.bfloat16)
                for p in t.pieces:
                    src = full[p.source].reshape(-1, full[p.source].shape[-1])
                    x[p.at[0]:p.at[0] + p.height, p.at[1]:p.at[1] + p.width] = src[p.rows[0]:p.rows[1], p.cols[0]:p.cols[1]]
                cases.append((f"step {step} rank {rank} {t.name}", x))
    g = torch.Generator().manual_seed(11)
    for shape in ((4096, 7168), (2112, 7168), (3072, 4096)):
        x = torch.randn(*shape, generator=g) * torch.logspace(-4, 2, shape[0]).view(-1, 1)
        cases.append((f"random {shape[0]}x{shape[1]}", x.to(torch.bfloat16)))
    bad, old_bad = [], 0
    for name, x in cases:
        q, s = fp8.quantize(x)
        qg, sg = fp8.quantize(x.to(dev))
        if not (torch.equal(qg.cpu().view(torch.uint8), q.view(torch.uint8)) and torch.equal(sg.cpu(), s)):
            bad.append(name)
        if not torch.equal(old_scales(torch, x.to(dev)).cpu(), s):
            old_bad += 1
    name = torch.cuda.get_device_name(0) if dev == "cuda" else dev
    print(f"fp8 on {name} (torch {torch.__version__}): {len(cases)} tensors, "
          f"{len(bad)} differ from the CPU; the first run's formula (amax / 448.0) differs in the scales of "
          f"{old_bad}; {time.monotonic() - t0:.1f} s")
    for name in bad[:20]:
        print("DIFFERS:", name)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
