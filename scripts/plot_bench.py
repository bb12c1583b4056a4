#!/usr/bin/env python3
"""Plots xfer-bench JSON rows: Gbit/s against message size for single
writes (xfer and each baseline), and page writes per second against page
size for paged writes.

    plot_bench.py --out bench.png rows.jsonl [more.jsonl ...]

xfer-bench --plot FILE.png runs this itself. It installs nothing: without
matplotlib it says how to get it and exits 3, and xfer-bench carries on.
"""
import argparse
import json
import sys

INSTALL_HINT = ("apt-get install python3-matplotlib (Debian), or pip install matplotlib "
                "inside a virtual environment")


def load_matplotlib():
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt
    return plt


def read_rows(paths):
    rows = []
    for path in paths:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    rows.append(json.loads(line))
    return rows


def size_label(n):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return "%d%s" % (n >> shift, unit)
    return str(n)


STYLE = {"xfer": "o-", "raw": "s--", "ucx": "^:", "memcpy": "x-."}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="PNG file to write")
    ap.add_argument("inputs", nargs="+", help="JSON-lines files from xfer-bench --json")
    args = ap.parse_args()
    rows = read_rows(args.inputs)
    if not rows:
        print("plot_bench: no rows to plot", file=sys.stderr)
        return 2
    plt = load_matplotlib()
    if plt is None:
        print(f"plot_bench: matplotlib is not installed for {sys.executable}; no plot. "
              f"Install it: {INSTALL_HINT}", file=sys.stderr)
        return 3

    single = [r for r in rows if r["op"] == "single" and r.get("gbps") is not None]
    paged = [r for r in rows if r["op"] == "paged" and r.get("mops") is not None]
    panels = [p for p in (single, paged) if p]
    fig, axes = plt.subplots(1, len(panels), figsize=(7 * len(panels), 4.8), squeeze=False)
    providers = sorted({r["provider"] for r in rows})
    ax_i = 0
    if single:
        ax = axes[0][ax_i]
        ax_i += 1
        for prov in providers:
            for impl in ("xfer", "raw", "ucx", "memcpy"):
                pts = sorted((r["bytes"], r["gbps"]) for r in single
                             if r["impl"] == impl and r["provider"] == prov)
                if pts:
                    label = impl if len(providers) == 1 else "%s (%s)" % (impl, prov)
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], STYLE.get(impl, "o-"),
                            label=label)
        sizes = sorted({r["bytes"] for r in single})
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(sizes)
        ax.set_xticklabels([size_label(s) for s in sizes], rotation=45)
        ax.set_xlabel("bytes per WRITE")
        ax.set_ylabel("Gbit/s (average)")
        ax.set_title("single WRITE+imm")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    if paged:
        ax = axes[0][ax_i]
        for prov in providers:
            for npages in sorted({r["pages"] for r in paged}):
                for impl in ("xfer", "raw", "ucx"):
                    pts = sorted((r["bytes"], r["mops"]) for r in paged
                                 if r["impl"] == impl and r["pages"] == npages
                                 and r["provider"] == prov)
                    if pts:
                        label = "%s, %d pages/call" % (impl, npages)
                        if len(providers) > 1:
                            label += " (%s)" % prov
                        ax.plot([p[0] for p in pts], [p[1] for p in pts], STYLE.get(impl, "o-"),
                                label=label)
        sizes = sorted({r["bytes"] for r in paged})
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes)
        ax.set_xticklabels([size_label(s) for s in sizes])
        ax.set_xlabel("bytes per page")
        ax.set_ylabel("page writes, Mops/s")
        ax.set_title("paged WRITE (ucx: ucp_put_bw of one page)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="small")
    fig.suptitle("xfer-bench: " + ", ".join(providers))
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print("plot_bench: wrote %s" % args.out, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
