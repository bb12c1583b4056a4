#!/usr/bin/env python3
"""Issue 15's table from xfer-bench --json runs: per provider and row, the
raw loop and xfer in busy-poll and default mode, each xfer figure against
the raw loop of its own run (same run, same placement).

  scripts/host-table.py LABEL=FILE.json ...   (LABEL: PROVIDER/MODE, e.g. tcp/busy,
      tcp/default; the modes are columns in the order first given; the
      verdict is busy's)

Throughput rows (single, paged) compare Gbit/s and want >= 0.95x; ping-pong
rows (imm, send) compare the p50 half round trip and want <= raw + 0.5 us
(shm, ofi-shm) or raw + 2 us (tcp), judged in busy-poll mode only.

A label given several files (repetitions: separate runs, each with raw and
xfer taking turns) shows the median of the runs' raw and xfer figures and of
their ratios, the ratio's range over the runs (min..max) and n, the number
of runs; the verdict is the median ratio's."""
import json
import sys


def size(b):
    for unit, n in (("M", 1 << 20), ("K", 1 << 10)):
        if b >= n and b % n == 0:
            return f"{b // n}{unit}"
    return str(b)


def load(path):
    rows = {}
    try:
        lines = open(path).read().splitlines()
    except OSError:
        return rows
    for line in lines:
        if not line.startswith("{"):
            continue
        j = json.loads(line)
        key = (j["op"], j["bytes"], j["pages"])
        rows.setdefault(key, {})[j["impl"]] = j
    return rows


runs = {}
for arg in sys.argv[1:]:
    label, path = arg.split("=", 1)
    prov, mode = label.split("/")
    m = runs.setdefault(prov, {}).setdefault(mode, {})
    for k, pair in load(path).items():  # a label may come in several files: one list entry per file
        m.setdefault(k, []).append(pair)


def median(v):
    v = sorted(v)
    n = len(v)
    return None if not n else v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


spreads = False

order = {"single": 0, "paged": 1, "imm": 2, "send": 3}
for prov, modes in runs.items():
    slack = 2.0 if prov == "tcp" else 0.5
    names = list(modes)
    keys = sorted({k for m in modes.values() for k in m}, key=lambda k: (order.get(k[0], 9), k[2], k[1]))
    print(f"\n== {prov}: xfer in {', '.join(names)} mode against the raw loop of the same run")
    print(f"{'row':<14} {'unit':<7} " + " ".join(f"{'raw(' + m[:7] + ')':>12} {m[:12]:>12} {'ratio':>6}" for m in names)
          + "  verdict (busy)")
    for k in keys:
        op, b, pages = k
        name = f"{op} {size(b)}" + (f"x{pages}" if pages else "") if op != "imm" else "imm"
        ping = op in ("imm", "send")
        cells, verdict = [], "-"
        ranges = []
        for mode in names:
            val = (lambda j: j and j.get("p50_us")) if ping else (lambda j: j and j.get("gbps"))
            rvs, xvs, rels = [], [], []
            for r in modes.get(mode, {}).get(k, []):
                rv, xv = val(r.get("raw")), val(r.get("xfer"))
                if rv is not None:
                    rvs.append(rv)
                if xv is not None:
                    xvs.append(xv)
                if ping and rv is not None and xv is not None:
                    rels.append(xv - rv)
                elif not ping and rv and xv is not None:
                    rels.append(xv / rv)
            rel = median(rels)
            cells.append((median(rvs), median(xvs), rel))
            if len(rels) > 1:
                spreads = True
                fmt = (lambda v: f"{v:+.2f}") if ping else (lambda v: f"{v:.3f}")
                ranges.append(f"{mode}: {fmt(min(rels))}..{fmt(max(rels))} n={len(rels)}")
            if mode == "busy" and rel is not None:
                ok = rel <= slack if ping else rel >= 0.95
                verdict = "ok" if ok else "MISS"
        unit = "us p50" if ping else "Gbit/s"
        f = lambda v, w=12, p=".3g": f"{v:>{w}{p}}" if v is not None else f"{'-':>{w}}"
        rel_fmt = lambda v: (f"{v:>+6.2f}" if ping else f"{v:>6.3f}") if v is not None else f"{'-':>6}"
        print(f"{name:<14} {unit:<7} " + " ".join(f"{f(rv)} {f(xv)} {rel_fmt(rel)}" for rv, xv, rel in cells)
              + f"  {verdict}" + (f"  [{'; '.join(ranges)}]" if ranges else ""))
    print(f"(ratio: xfer/raw for Gbit/s; for ping-pongs xfer - raw in us, target <= +{slack})")
if spreads:
    print("([mode: min..max n=N]: the ratio's range over N runs; the ratio shown is their median)")
