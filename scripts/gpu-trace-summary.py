#!/usr/bin/env python3
"""Per-process summary of XFER_GPU_TRACE records (one CSV per process).

    scripts/gpu-trace-summary.py TRACE_CSV ...

For each file (the engine writes one per process, PATH.PID): the first tenth
of the records is skipped (warm-up), then p50 of the call (t_open ->
t_launched), of the event record (t_launched -> t_recorded), p50 and p90 of
recorded -> seen done by the worker (t_done: a copy's queueing behind the
copies before it on the stream, its own time, and the worker's delay to
poll), and p50 and mean of the gap between consecutive opens (the rate at
which that process hands copies to the GPU), in us. Used in
docs/performance.md (issue 14, session 9) to tell the source's stagings
(opened one at a time, or in a burst) from the target's landings.
"""
import csv
import statistics
import sys


def q(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p * len(v)))] / 1e3


def summary(path):
    rows = list(csv.DictReader(open(path)))
    rows = rows[len(rows) // 10:]
    if len(rows) < 2:
        return f"{path}: {len(rows)} records after the warm-up"
    t = lambda r, k: int(r[k])
    opens = [t(r, "t_open") for r in rows]
    call = [t(r, "t_launched") - t(r, "t_open") for r in rows]
    rec = [t(r, "t_recorded") - t(r, "t_launched") for r in rows]
    done = [t(r, "t_done") - t(r, "t_recorded") for r in rows]
    gap = [b - a for a, b in zip(opens, opens[1:])]
    kinds = ",".join(sorted({r["kind"] for r in rows}))
    return (f"{path} {len(rows)} records ({kinds}): call p50 {q(call, .5):.1f} record p50 {q(rec, .5):.1f} "
            f"seen-done p50 {q(done, .5):.1f} p90 {q(done, .9):.1f}; gap between opens p50 {q(gap, .5):.1f} "
            f"mean {statistics.mean(gap) / 1e3:.1f} us")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for p in sys.argv[1:]:
        print(summary(p))
