#!/usr/bin/env python3
"""Per-operation costs of our engine, measured through the Python binding,
for the RL update simulator (xfer.rl.sim reads the JSON this writes).

* ``submit_us``: host time of one ``Engine.write`` call (1 MiB, with an
  immediate) inside a batch, as the trainer's pipeline issues them;
  median and p90 over batches, the wait for completions excluded.
* ``barrier_us``: ``Engine.barrier`` over a group of two engines plus the
  wait for the other's immediate, median of round trips (loopback: the
  software path, not a network's latency).
* ``write_GBps``: bytes per second of 64 MiB of 4 MiB writes between the
  engines (this machine's provider and memory, for context only: the
  simulator's NIC speed is an input).

Both engines live in this process, on ``--provider`` (``shm``, xfer's own
same-host backend, by default; ``ofi-shm`` is libfabric's). The JSON also
records the machine, the checkout's commit, the library loaded and the load
average before and after, since the host costs depend on all of them.

    python3 python/bench/rl_engine_costs.py --out docs/rl/engine-costs.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

import xfer  # noqa: E402


def _commit() -> str:
    """The checkout's commit (with "+dirty" when the tree has changes), or "unknown"."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        sha = subprocess.run(["git", "-C", here, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", here, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return sha + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--provider", default="shm")
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--out")
    a = ap.parse_args()
    kw = {"provider": a.provider}
    if a.provider.startswith("tcp"):
        kw["nics"] = "lo"
    load0 = os.getloadavg()[0]
    with xfer.Engine(**kw) as A, xfer.Engine(**kw) as B:
        pb = A.add_peer(B.address)
        pa = B.add_peer(A.address)
        src = np.ones(64 << 20, np.uint8)
        dst = np.zeros(64 << 20, np.uint8)
        rs = A.register(src)
        rd = B.register(dst)
        rr = A.import_region(pb, rd.descriptor)
        per = []
        for b in range(a.batches):
            ops = []
            t0 = time.perf_counter_ns()
            for i in range(a.batch):
                ops.append(A.write(rs, rr, 1 << 20, src_offset=(i % 64) << 20, dst_offset=(i % 64) << 20, imm=1))
            per.append((time.perf_counter_ns() - t0) / a.batch / 1000)
            xfer.wait(ops, 60)
            B.imm_disarm(1)
        ga = A.group([pb, A.add_peer(A.address)])
        gb = B.group([pa, B.add_peer(B.address)])
        rtt = []
        for i in range(300):
            imm = 0x30000000 + i
            ca = A.expect_imm(imm, 2)
            cb = B.expect_imm(imm, 2)
            t0 = time.perf_counter_ns()
            A.barrier(ga, imm)
            B.barrier(gb, imm)
            ca.result(10)
            cb.result(10)
            rtt.append((time.perf_counter_ns() - t0) / 1000)
        n = 16
        t0 = time.perf_counter()
        ops = [A.write(rs, rr, 4 << 20, src_offset=i << 22, dst_offset=i << 22) for i in range(n)]
        xfer.wait(ops, 60)
        gbps = n * (4 << 20) / (time.perf_counter() - t0) / 1e9
        assert dst[: n << 22].all(), "the writes did not land"
    per.sort()
    res = {
        "provider": A.provider, "machine": f"{platform.node()} ({os.cpu_count()} CPUs)", "python": platform.python_version(),
        "submit_us_p50": round(statistics.median(per), 2), "submit_us_p90": round(per[int(len(per) * 0.9) - 1], 2),
        "barrier_us_p50": round(statistics.median(rtt), 1), "write_GBps": round(gbps, 2),
        "commit": _commit(), "library": xfer._lib.LIBRARY_PATH,
        "loadavg_1min": [round(load0, 2), round(os.getloadavg()[0], 2)],
        "command": "python3 python/bench/rl_engine_costs.py " + " ".join(sys.argv[1:]),
    }
    print(json.dumps(res, indent=1))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
