#!/usr/bin/env python3
"""xfer beside NIXL and Mooncake Transfer Engine, same cases, same run.

Cases (issue 15), between two processes on this host:

* single WRITEs of 64 KiB, 1 MiB and 16 MiB, 64 in flight (a new write is
  posted as soon as one completes), GB/s;
* one paged WRITE of 10,000 x 4 KiB pages, scattered by a permutation on
  both sides (page i goes from src page sperm[i] to dst page dperm[i]), one
  transfer at a time, k pages/s.

Transports: ``tcp`` (xfer's tcp provider on lo, NIXL's UCX backend with
UCX_TLS=tcp, Mooncake's TCP transport) and ``shm`` (xfer's own same-host
backend, NIXL's UCX with UCX_TLS=posix,cma,self; the Mooncake wheel has no
shared-memory transport, so it has no shm row).

Engines alternate (the order rotates every round), ``--rounds`` rounds (3);
every case of every round is verified: the target zeroes its buffer before
the case and, after it, hashes what landed, which the initiator compares
with the hash of what it should be. The table shows each engine's median
round and xfer's ratio to each peer (> 1: xfer is faster).

NIXL and Mooncake come from PyPI into a virtual environment of their own
(``--venv``, default build/peers-venv, reused when present): nixl-cu13
and the ``nixl`` meta package with --no-deps (the meta package requires
the cu12 and cu13 variants; nixl-cu13 declares torch, which host memory
does not need: about 0.5 GB instead of 6), numpy and
mooncake-transfer-engine-non-cuda. So it needs PyPI: a benchmark for a
machine that reaches it (the GPU machine reaches nothing outside).

    python3 python/bench/peers.py [--build build] [--providers tcp,shm]
        [--engines xfer,nixl,mooncake] [--rounds 3] [--seconds 1.0] [--json]

(``make bench-peers``). Setting notes: /work/shared/reference/peer-engines-notes.md.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
KiB, MiB = 1024, 1024 * 1024
SIZES = (64 * KiB, MiB, 16 * MiB)
INFLIGHT = 64
PAGES, PAGE_LEN = 10_000, 4 * KiB
BUF_MAX = 256 * MiB  # per side: 16 MiB x 16 slots; 64 KiB and 1 MiB get 64 slots
PEER_PKGS = (["--no-deps", "nixl-cu13==1.5.1", "nixl==1.5.1"],
             ["numpy", "mooncake-transfer-engine-non-cuda==0.3.13.post1"])
# Mooncake refuses batches above 1,024 requests unless these are raised.
MC_ENV = {"MC_TCP_MAX_QUEUED_TRANSFERS_PER_PEER": "16384", "MC_TCP_MAX_PENDING_ADMISSIONS_PER_PEER": "16384"}
UCX_TLS = {"tcp": "tcp,self", "shm": "posix,cma,self"}


# -- the virtual environment ------------------------------------------------

def have_peers() -> bool:
    try:
        import mooncake.engine  # noqa: F401
        import nixl._api  # noqa: F401
        import numpy  # noqa: F401
    except ImportError:
        return False
    return True


def ensure_venv(venv: Path) -> None:
    """Re-executes this script in ``venv`` (made and filled once) unless its Python already has the peers."""
    if have_peers():
        return
    py = venv / "bin" / "python"
    stamp = venv / ".xfer-peers"
    if Path(sys.prefix).resolve() == venv.resolve():
        stamp.unlink(missing_ok=True)  # filled, yet without them: fill it again next time
        sys.exit(f"peers: {venv} lacks NIXL or Mooncake; run again to reinstall them")
    if not stamp.exists():
        print(f"peers: installing NIXL and Mooncake into {venv} (about 0.5 GB, once)", file=sys.stderr)
        if not py.exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1")
        for pkgs in PEER_PKGS:
            subprocess.run([str(py), "-m", "pip", "install", "-q", *pkgs], check=True, env=env)
        stamp.touch()
    os.execv(str(py), [str(py), *sys.argv])


# -- the cases, engine-neutral ------------------------------------------------

def slots_for(size: int) -> int:
    return min(INFLIGHT, BUF_MAX // size)


def case_list() -> List[Tuple[str, int]]:
    return [(f"single {size // KiB}K" if size < MiB else f"single {size // MiB}M", size) for size in SIZES] + [
        (f"paged {PAGE_LEN // KiB}K x{PAGES}", 0)]


def perms(seed: int):
    import numpy as np
    rng = np.random.default_rng(seed)
    return rng.permutation(PAGES).astype(np.uint32), rng.permutation(PAGES).astype(np.uint32)


def fill(buf, nbytes: int, seed: int) -> None:
    import numpy as np
    words = buf[:nbytes].view(np.uint64)
    words[:] = np.random.default_rng(seed).integers(0, 2**63, words.size, dtype=np.uint64)


def digest(view) -> str:
    return hashlib.blake2b(memoryview(view), digest_size=16).hexdigest()


def expected_digest(src, size: int, seed: int) -> Tuple[int, str]:
    """(bytes the target must hash, their digest) for a case."""
    if size:
        n = size * slots_for(size)
        return n, digest(src[:n])
    import numpy as np
    sperm, dperm = perms(seed)
    want = np.zeros(PAGES * PAGE_LEN, np.uint8)
    want.reshape(PAGES, PAGE_LEN)[dperm] = src[:PAGES * PAGE_LEN].reshape(PAGES, PAGE_LEN)[sperm]
    return want.size, digest(want)


def yield_cpu() -> None:
    time.sleep(0)  # NIXL's and Mooncake's Python APIs have no blocking wait


def windowed(post: Callable[[int], Any], done: Callable[[Any], bool], seconds: float,
             poll: Optional[Callable[[], Any]] = None, idle: Callable[[], Any] = yield_cpu) -> Tuple[int, float]:
    """Keeps INFLIGHT operations in flight for ``seconds``, then drains; (completed ops, elapsed s).

    ``post(k)`` starts operation k (slot k % slots) and returns its token;
    ``done(token)`` polls it (True once complete; raises on failure);
    ``poll()``, where given, drives the engine once per pass over the window;
    ``idle()`` follows a pass that found nothing complete: each engine's own
    way to wait, so that a spinning benchmark does not take the CPU that the
    engine's threads (or the peer process) need on a small machine."""
    q = [post(k) for k in range(INFLIGHT)]
    n, t0 = 0, time.perf_counter()
    end = t0 + seconds
    k = INFLIGHT
    stop = False
    live = INFLIGHT
    while live:
        if poll is not None:
            poll()
        got = 0
        for i in range(INFLIGHT):
            tok = q[i]
            if tok is None or not done(tok):
                continue
            n += 1
            got += 1
            if not stop and time.perf_counter() >= end:
                stop = True
            if stop:
                q[i] = None
                live -= 1
            else:
                q[i] = post(k)
                k += 1
        if not got:
            idle()
    return n, time.perf_counter() - t0


def serial(run_one: Callable[[], None], seconds: float) -> Tuple[int, float]:
    n, t0 = 0, time.perf_counter()
    while True:
        run_one()
        n += 1
        t = time.perf_counter() - t0
        if t >= seconds:
            return n, t


# -- each engine: a target process and the initiator ---------------------------

def xfer_side(provider: str, role: str, buf, conn, busy: bool):
    sys.path.insert(0, str(REPO / "python"))
    import xfer

    kw: Dict[str, Any] = {"provider": provider, "progress_thread": False}
    if provider.startswith("tcp"):
        kw["nics"] = "lo"
    if busy:
        kw["busy_poll"] = 1
    eng = xfer.Engine(**kw)
    region = eng.register(buf)
    if role == "target":
        conn.send((eng.address, region.descriptor))
        eng.add_peer(conn.recv())
        return eng, (region,)
    addr, desc = conn.recv()
    peer = eng.add_peer(addr)
    conn.send(eng.address)
    dst = eng.import_region(peer, desc)
    return eng, (region, dst)


def xfer_cases(eng, keep, seconds: float):
    region, dst = keep

    def single(size: int):
        slots = slots_for(size)

        def post(k: int):
            off = (k % slots) * size
            return eng.write(region, dst, size, src_offset=off, dst_offset=off)

        def done(op) -> bool:
            if not op.done():
                return False
            op.result(0)
            return True
        # Its blocking wait (spins spin_us, then sleeps) instead of a yield.
        return windowed(post, done, seconds, lambda: eng.progress(0), lambda: eng.progress(0.01))

    def paged(seed: int):
        sperm, dperm = perms(seed)

        def one():
            eng.write_paged(region, dst, sperm, dperm, PAGE_LEN).result(60)
        one()  # warm
        return serial(one, seconds)
    return single, paged


def nixl_agent(name: str, provider: str, target: bool):
    os.environ["UCX_TLS"] = UCX_TLS[provider]
    if provider == "tcp":
        os.environ.setdefault("UCX_NET_DEVICES", "lo")
    from nixl._api import nixl_agent, nixl_agent_config
    # Over shm the target never progresses (UCX's cma writes need no target),
    # and the progress thread costs a CPU of two: off, as NIXL did best. Over
    # tcp the target's UCX must progress: its thread on.
    conf = nixl_agent_config(enable_prog_thread=(provider == "tcp"), backends=[])
    agent = nixl_agent(name, conf)
    agent.create_backend("UCX", {"ucx_error_handling_mode": "none"})
    return agent


def nixl_side(provider: str, role: str, buf, conn, busy: bool):
    agent = nixl_agent(role, provider, role == "target")
    reg = agent.register_memory([(buf.ctypes.data, buf.nbytes, 0, "")], "DRAM")
    if role == "target":
        conn.send((agent.get_agent_metadata(), buf.ctypes.data))
        agent.add_remote_agent(conn.recv())
        return agent, (reg,)
    meta, base = conn.recv()
    agent.add_remote_agent(meta)
    conn.send(agent.get_agent_metadata())
    return agent, (reg, base)


def nixl_cases(agent, keep, seconds: float):
    import numpy as np
    reg, base = keep
    src_base = None

    def descs(addrs, length: int):
        a = np.zeros((len(addrs), 3), np.uint64)
        a[:, 0] = addrs
        a[:, 1] = length
        return agent.get_xfer_descs(a, "DRAM")

    def state(h) -> bool:
        s = agent.check_xfer_state(h)
        if s == "DONE":
            return True
        if s == "ERR":
            raise RuntimeError("NIXL transfer failed")
        return False

    def single(size: int):
        slots = slots_for(size)
        offs = np.arange(slots, dtype=np.uint64) * size
        local = agent.prep_xfer_dlist("NIXL_INIT_AGENT", descs(src_base + offs, size), "DRAM")
        remote = agent.prep_xfer_dlist("target", descs(base + offs, size), "DRAM")
        handles = [agent.make_prepped_xfer("WRITE", local, [k % slots], remote, [k % slots]) for k in range(INFLIGHT)]

        def post(k: int):
            h = handles[k % INFLIGHT]
            if agent.transfer(h) == "ERR":
                raise RuntimeError("NIXL post failed")
            return h
        try:
            return windowed(post, state, seconds)
        finally:
            for h in handles:
                agent.release_xfer_handle(h)
            agent.release_dlist_handle(local)
            agent.release_dlist_handle(remote)

    def paged(seed: int):
        sperm, dperm = perms(seed)
        h = agent.initialize_xfer("WRITE", descs(src_base + sperm.astype(np.uint64) * PAGE_LEN, PAGE_LEN),
                                  descs(base + dperm.astype(np.uint64) * PAGE_LEN, PAGE_LEN), "target")

        def one():
            if agent.transfer(h) == "ERR":
                raise RuntimeError("NIXL post failed")
            while not state(h):
                yield_cpu()
        try:
            one()
            return serial(one, seconds)
        finally:
            agent.release_xfer_handle(h)

    def bind(buf):
        nonlocal src_base
        src_base = buf.ctypes.data
    return single, paged, bind


def mc_side(provider: str, role: str, buf, conn, busy: bool):
    os.environ.update(MC_ENV)
    from mooncake.engine import TransferEngine
    eng = TransferEngine()
    rc = eng.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "")
    if rc:
        raise RuntimeError(f"Mooncake initialize: {rc}")
    rc = eng.register_memory(buf.ctypes.data, buf.nbytes)
    if rc:
        raise RuntimeError(f"Mooncake register_memory: {rc}")
    if role == "target":
        conn.send((f"127.0.0.1:{eng.get_rpc_port()}", buf.ctypes.data))
        return eng, ()
    name, base = conn.recv()
    return eng, (name, base, buf.ctypes.data)


def mc_cases(eng, keep, seconds: float):
    name, base, src = keep

    def single(size: int):
        slots = slots_for(size)

        def post(k: int):
            off = (k % slots) * size
            bid = eng.transfer_submit_write(name, src + off, base + off, size)
            if bid < 0:
                raise RuntimeError(f"Mooncake submit: {bid}")
            return bid

        def done(bid) -> bool:
            s = eng.transfer_check_status(bid)
            if s < 0:
                raise RuntimeError(f"Mooncake transfer failed: {s}")
            return s == 1
        return windowed(post, done, seconds)

    def paged(seed: int):
        sperm, dperm = perms(seed)
        srcs = [src + int(p) * PAGE_LEN for p in sperm]
        dsts = [base + int(p) * PAGE_LEN for p in dperm]
        lens = [PAGE_LEN] * PAGES

        def one():
            rc = eng.batch_transfer_sync_write(name, srcs, dsts, lens)
            if rc:
                raise RuntimeError(f"Mooncake batch write: {rc}")
        one()
        return serial(one, seconds)
    return single, paged


SIDES = {"xfer": xfer_side, "nixl": nixl_side, "mooncake": mc_side}


def alloc():
    import numpy as np
    buf = np.zeros(BUF_MAX, np.uint8)
    buf[::4096] = 0  # touch every page before registering
    return buf


def target_main(engine: str, provider: str, conn, busy: bool) -> None:
    buf = alloc()
    eng, keep = SIDES[engine](provider, "target", buf, conn, busy)
    while True:
        msg = conn.recv()
        if msg[0] == "zero":
            buf[:msg[1]] = 0
            conn.send("ok")
        elif msg[0] == "digest":
            conn.send(digest(buf[:msg[1]]))
        else:
            break
    conn.send("bye")
    sys.stdout.flush()
    os._exit(0)  # NIXL's bundled netlink library crashes in its exit cleanup


def initiator_main(engine: str, provider: str, conn, tconn, seconds: float, seed: int, busy: bool) -> None:
    """Runs every case against the target reached through ``tconn``; sends {case: (value, ok)} to ``conn``."""
    try:
        buf = alloc()
        eng, keep = SIDES[engine](provider, "initiator", buf, tconn, busy)
        if engine == "xfer":
            single, paged = xfer_cases(eng, keep, seconds)
        elif engine == "nixl":
            single, paged, bind = nixl_cases(eng, keep, seconds)
            bind(buf)
        else:
            single, paged = mc_cases(eng, keep, seconds)
        out: Dict[str, Any] = {}
        for i, (name, size) in enumerate(case_list()):
            cseed = seed * 10 + i
            fill(buf, size * slots_for(size) if size else PAGES * PAGE_LEN, cseed)
            n, want = expected_digest(buf, size, cseed)
            tconn.send(("zero", n))
            tconn.recv()
            if size:
                ops, t = single(size)
                value = ops * size / t / 1e9
            else:
                ops, t = paged(cseed)
                value = ops * PAGES / t / 1e3
            tconn.send(("digest", n))
            out[name] = (value, tconn.recv() == want)
        tconn.send(("quit",))
        tconn.recv()
        conn.send(out)
    except Exception as exc:  # reported, not fatal to the other engines
        conn.send({"error": f"{type(exc).__name__}: {exc}"})
    sys.stdout.flush()
    os._exit(0)


def run_pair(engine: str, provider: str, seconds: float, seed: int, busy: bool, timeout: float) -> Dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    a, b = ctx.Pipe()
    r, w = ctx.Pipe()
    tgt = ctx.Process(target=target_main, args=(engine, provider, b, busy), daemon=True)
    ini = ctx.Process(target=initiator_main, args=(engine, provider, w, a, seconds, seed, busy), daemon=True)
    tgt.start()
    ini.start()
    res: Dict[str, Any] = {"error": f"no result within {timeout:.0f} s"}
    if r.poll(timeout):
        res = r.recv()
    for p in (ini, tgt):
        p.join(10)
        if p.is_alive():
            p.kill()
            p.join()
    return res


# -- the report ----------------------------------------------------------------

def fmt(v: Optional[float]) -> str:
    if v is None:
        return "—"
    return f"{v:.3g}" if v < 100 else f"{v:.0f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.environ.get("BUILD", str(REPO / "build")), help="xfer's build folder (libxfer.so)")
    ap.add_argument("--venv", default=None, help="the peers' virtual environment (default BUILD/peers-venv)")
    ap.add_argument("--providers", default="tcp,shm")
    ap.add_argument("--engines", default="xfer,nixl,mooncake")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=1.0, help="per case, engine and round")
    ap.add_argument("--busy-poll", action="store_true", help="xfer's worker in busy-poll mode (default: sleeping)")
    ap.add_argument("--timeout", type=float, default=180.0, help="per engine, provider and round")
    ap.add_argument("--json", action="store_true", help="also print every round as JSON")
    args = ap.parse_args()
    build = Path(args.build).resolve()
    ensure_venv(Path(args.venv).resolve() if args.venv else build / "peers-venv")
    # Quiet the peers' info logs (Mooncake's glog, NIXL's own).
    os.environ.setdefault("GLOG_minloglevel", "2")
    os.environ.setdefault("NIXL_LOG_LEVEL", "WARN")
    lib = build / "libxfer.so"
    if "XFER_LIBRARY" not in os.environ and lib.exists():
        os.environ["XFER_LIBRARY"] = str(lib)

    engines = args.engines.split(",")
    providers = args.providers.split(",")
    cases = [c for c, _ in case_list()]
    got: Dict[Tuple[str, str], Dict[str, List[float]]] = {}
    failed: List[str] = []
    rounds_json = []
    load0 = os.getloadavg()[0]
    for rnd in range(args.rounds):
        for prov in providers:
            order = engines[rnd % len(engines):] + engines[:rnd % len(engines)]
            for eng in order:
                if eng == "mooncake" and prov == "shm":
                    continue  # that wheel has TCP and RDMA only (protocol "shm" starts TCP)
                t0 = time.time()
                res = run_pair(eng, prov, args.seconds, 1000 * rnd + 7, args.busy_poll, args.timeout)
                rounds_json.append({"round": rnd, "engine": eng, "provider": prov, "result": res})
                if "error" in res:
                    failed.append(f"round {rnd} {eng} {prov}: {res['error']}")
                    print(f"round {rnd} {prov} {eng}: {res['error']}", file=sys.stderr)
                    continue
                for c, (v, ok) in res.items():
                    if not ok:
                        failed.append(f"round {rnd} {eng} {prov} {c}: bytes differ")
                        continue
                    got.setdefault((eng, prov), {}).setdefault(c, []).append(v)
                print(f"round {rnd} {prov} {eng}: " + ", ".join(f"{c} {fmt(v)}{'' if ok else ' BAD'}"
                      for c, (v, ok) in res.items()) + f" ({time.time() - t0:.0f} s)", file=sys.stderr)

    def med(eng: str, prov: str, c: str) -> Optional[float]:
        v = got.get((eng, prov), {}).get(c)
        return statistics.median(v) if v else None

    def spread(eng: str, prov: str, c: str) -> str:
        v = got.get((eng, prov), {}).get(c)
        return f"{(max(v) - min(v)) / statistics.median(v) * 100:.0f}%" if v and len(v) > 1 else "—"

    peers = [e for e in engines if e != "xfer"]
    print(f"\npeers: {args.rounds} rounds x {args.seconds} s per case, engines alternating, bytes verified;"
          f" {os.cpu_count()} CPUs, load {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end;"
          f" xfer {'busy-poll' if args.busy_poll else 'default'} mode")
    print("single: GB/s, 64 in flight; paged: k pages/s, one transfer at a time; median round (spread)\n")
    head = "| transport | case | " + " | ".join(engines + [f"xfer/{p}" for p in peers]) + " |"
    print(head)
    print("|" + "---|" * (2 + len(engines) + len(peers)))
    for prov in providers:
        for c in cases:
            cells = [f"{fmt(med(e, prov, c))} ({spread(e, prov, c)})" if med(e, prov, c) else "—" for e in engines]
            x = med("xfer", prov, c)
            ratios = []
            for p in peers:
                pv = med(p, prov, c)
                ratios.append(f"{x / pv:.2f}" if x and pv else "—")
            print(f"| {prov} | {c} | " + " | ".join(cells + ratios) + " |")
    if "mooncake" in engines and "shm" in providers:
        print("\nMooncake on shm: —, its PyPI wheel (non-cuda) has TCP and RDMA transports only.")
    if failed:
        print("\nFAILED:\n  " + "\n  ".join(failed))
    if args.json:
        print(json.dumps(rounds_json))
    sys.stdout.flush()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
