#!/usr/bin/env python3
"""One traced paged row of xfer-gpu-bench on one time line.

    scripts/gpu-ptrace.py BENCH_LOG TRACE_CSV

BENCH_LOG: the bench's output with XFER_BENCH_TRACE=1 (its "ptrace" lines:
each call's stages from the loop's start t0, CLOCK_MONOTONIC); TRACE_CSV: the
writer's XFER_GPU_TRACE records (t_* columns CLOCK_MONOTONIC on the worker,
rt_* CLOCK_REALTIME beside them, gpu_* the kernel's %globaltimer). Prints, in
us from t0, each call's stages and each kernel launch of the loop: when it
was opened, launched, started and ended on the GPU, and when the worker saw
it end. The GPU clock is put on the host's by the latest end the worker saw
soonest: %globaltimer follows CLOCK_REALTIME up to an offset, and no copy's
end is seen before it happens, so the offset is at least the largest
(gpu_end - rt_done) over the records (good to a poll's time, ~1 us, where
the worker was waiting for an end; OFFSET_US=x sets it otherwise).
"""
import csv
import os
import re
import sys


def main(log_path, csv_path):
    t0 = None
    calls = []
    for line in open(log_path):
        m = re.search(r"ptrace .*: t0 (\d+) ns", line)
        if m:
            t0 = int(m.group(1))
            continue
        m = re.search(r"ptrace .*: call +(\d+) +(.*) us", line)
        if m:
            vals = [float(x) for x in re.findall(r"(-?\d+\.\d+)", m.group(2))]
            calls.append((int(m.group(1)), vals))
    if t0 is None:
        sys.exit("no ptrace lines in " + log_path)
    recs = list(csv.DictReader(open(csv_path)))
    off = max(int(r["gpu_end"]) - int(r["rt_done"]) for r in recs if r["kind"] == "kernel" and int(r["gpu_end"]))
    if os.environ.get("OFFSET_US"):
        # A worker busy when every kernel ended saw each end late: take the
        # offset of a run whose worker sat waiting (it drifts a few ppm).
        off = int(float(os.environ["OFFSET_US"]) * 1000)
    print("GPU clock - CLOCK_REALTIME taken as %.2f us" % (off / 1e3))

    def mono(r, col):  # a GPU stamp on the host's CLOCK_MONOTONIC, us from t0
        v = int(r[col])
        if not v:
            return float("nan")
        rt_minus_mono = int(r["rt_launched"]) - int(r["t_launched"])
        return (v - off - rt_minus_mono - t0) / 1e3

    def rel(r, col):
        return (int(r[col]) - t0) / 1e3

    print("calls (us from t0): call enq took issued queued notice done app")
    for k, v in calls:
        print("  %3d " % k + " ".join("%8.2f" % x for x in v))
    print("launches from t0 on (us from t0; gpu = GPU clock moved onto the host's):")
    print("  kind   calls  MiB   open  launch launched  gpu_start last_start mean_end  gpu_end  seen   gpu_us")
    for r in recs:
        if int(r["t_launched"]) < t0:
            continue
        gs, ge = mono(r, "gpu_start"), mono(r, "gpu_end")
        extra = ""
        if "gpu_last_start" in r:
            extra = "%9.2f %9.2f" % (mono(r, "gpu_last_start"), mono(r, "gpu_mean_end"))
        print("  %-6s %5s %5.0f %7.2f %7.2f %8.2f %9.2f %s %8.2f %7.2f %7.2f" % (
            r["kind"], r["calls"], int(r["bytes"]) / 2**20, rel(r, "t_open"), rel(r, "t_launch"),
            rel(r, "t_launched"), gs, extra, ge, rel(r, "t_done"), ge - gs))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
