"""Leaks, library lookup, the ABI mirror of xfer.h and xfer_kv.h, and torch (CPU and CUDA)."""
from __future__ import annotations

import gc
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import xfer
from xfer import _lib
from conftest import make_engine

pytestmark = pytest.mark.local

PKG_DIR = Path(xfer.__file__).resolve().parent
REPO = PKG_DIR.parent.parent
INCLUDE = Path(os.environ.get("XFER_INCLUDE_DIR", REPO / "include"))
HEADER = INCLUDE / "xfer.h"
KV_HEADER = INCLUDE / "xfer_kv.h"


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_no_leak_over_10000_register_cycles() -> None:
    with make_engine("tcp") as e:
        peer = e.add_peer(e.address)
        buf = np.zeros(16384, np.uint8)

        def cycle(i: int) -> None:
            if i % 4 == 3:
                r = e.register(buf[(i % 8) * 1024 :])
                del r  # collected: deregisters itself
            else:
                with e.register(buf[(i % 8) * 1024 :]) as r:
                    desc = r.descriptor
                    if i % 4 == 1:
                        e.import_region(peer, desc).close()

        for i in range(1000):  # warm-up: allocator and caches reach steady state
            cycle(i)
        gc.collect()
        base = rss_bytes()
        for i in range(10000):
            cycle(i)
        gc.collect()
        grown = rss_bytes() - base
        assert e.region_count == 0, f"{e.region_count} regions still registered"
        assert e.remote_region_count == 0, f"{e.remote_region_count} imported regions still held"
        assert e.pending_count == 0
        # 10,000 leaked regions would be >= 10000 * (C struct + Python objects) ~ several MiB.
        assert grown < 2 * 1024 * 1024, f"RSS grew by {grown / 1024:.0f} KiB over 10,000 cycles"


def _run_import(env_extra: dict, pythonpath: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "XFER_LIBRARY"}
    env.update(env_extra)
    env["PYTHONPATH"] = pythonpath
    return subprocess.run(
        [sys.executable, "-c", "import xfer; print(xfer.LIBRARY_PATH)"],
        env=env, capture_output=True, text=True, timeout=60, cwd="/",
    )


def test_library_lookup_errors_are_clear(tmp_path: Path) -> None:
    r = _run_import({"XFER_LIBRARY": str(tmp_path / "nope" / "libxfer.so")}, str(PKG_DIR.parent))
    assert r.returncode != 0
    assert "cannot load libxfer.so" in r.stderr and "$XFER_LIBRARY" in r.stderr and "does not exist" in r.stderr


def test_library_lookup_order(tmp_path: Path) -> None:
    current = xfer.LIBRARY_PATH
    # $XFER_LIBRARY wins.
    r = _run_import({"XFER_LIBRARY": current}, str(PKG_DIR.parent))
    assert r.returncode == 0 and r.stdout.strip() == current, r.stderr
    # A copy bundled in the package comes next.
    pkg = tmp_path / "site" / "xfer"
    shutil.copytree(PKG_DIR, pkg, ignore=shutil.ignore_patterns("__pycache__", "lib", "_build_info.py"))
    (pkg / "lib").mkdir()
    shutil.copy(current, pkg / "lib" / "libxfer.so")
    r = _run_import({}, str(pkg.parent))
    assert r.returncode == 0 and r.stdout.strip() == str(pkg / "lib" / "libxfer.so"), r.stderr
    # Then, in a source checkout, the repository's build/libxfer.so.
    if (REPO / "build" / "libxfer.so").exists():
        r = _run_import({}, str(PKG_DIR.parent))
        assert r.returncode == 0 and r.stdout.strip() == str(REPO / "build" / "libxfer.so"), r.stderr


# ------------------------------------------------------------------ the ABI


def _c_compiler():
    for cc in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if cc and shutil.which(cc):
            return cc
    return None


@pytest.fixture(scope="module")
def header_text() -> str:
    """Both public headers: the binding mirrors xfer.h and xfer_kv.h."""
    for h in (HEADER, KV_HEADER):
        if not h.exists():
            pytest.skip(f"{h.name} not found at {h} (set XFER_INCLUDE_DIR)")
    return HEADER.read_text() + "\n" + KV_HEADER.read_text()


def test_struct_layouts_match_the_header(tmp_path: Path, header_text: str) -> None:
    cc = _c_compiler()
    if cc is None:
        pytest.skip("no C compiler (cc/gcc/clang) to measure the C layouts")
    lines = ['#include <stddef.h>', '#include <stdio.h>', '#include "xfer.h"', '#include "xfer_kv.h"',
             "int main(void) {"]
    for cname, cls in _lib.STRUCTS.items():
        lines.append(f'printf("{cname} . %zu\\n", sizeof(struct {cname}));')
        for fname, _ in cls._fields_:
            lines.append(
                f'printf("{cname} {fname} %zu %zu\\n", offsetof(struct {cname}, {fname}), '
                f"sizeof(((struct {cname} *)0)->{fname}));"
            )
    for name, expr in _CONSTANTS.items():
        lines.append(f'printf("const {name} %llu\\n", (unsigned long long)({expr}));')
    lines.append("return 0; }")
    src = tmp_path / "probe.c"
    src.write_text("\n".join(lines))
    exe = tmp_path / "probe"
    r = subprocess.run([cc, "-I", str(HEADER.parent), str(src), "-o", str(exe)], capture_output=True, text=True)
    assert r.returncode == 0, f"xfer.h/xfer_kv.h no longer have the fields python/xfer/_lib.py mirrors:\n{r.stderr[-3000:]}"
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split("\n")
    mismatches = []
    for line in filter(None, out):
        parts = line.split()
        if parts[0] == "const":
            want = _CONSTANTS_PY[parts[1]] % 2**64  # printed as unsigned long long
            if int(parts[2]) != want:
                mismatches.append(f"{parts[1]}: C {parts[2]}, Python {want}")
            continue
        cls = _lib.STRUCTS[parts[0]]
        if parts[1] == ".":
            if ctypes_sizeof(cls) != int(parts[2]):
                mismatches.append(f"sizeof(struct {parts[0]}): C {parts[2]}, Python {ctypes_sizeof(cls)}")
            continue
        f = getattr(cls, parts[1])
        if (f.offset, f.size) != (int(parts[2]), int(parts[3])):
            mismatches.append(f"{parts[0]}.{parts[1]}: C offset/size {parts[2]}/{parts[3]}, Python {f.offset}/{f.size}")
    assert not mismatches, "python/xfer/_lib.py is out of step with xfer.h/xfer_kv.h:\n" + "\n".join(mismatches)
    # Every field of every mirror was compared (a probe line per field and size).
    assert len([ln for ln in out if ln]) == sum(len(c._fields_) + 1 for c in _lib.STRUCTS.values()) + len(_CONSTANTS)


def test_every_struct_of_the_header_is_mirrored(header_text: str) -> None:
    declared = set(re.findall(r"^struct (xfer_\w+) \{", header_text, flags=re.M))
    assert {"xfer_attr", "xfer_nic_info", "xfer_scatter", "xfer_scatter_entry", "xfer_trace", "xfer_topo_dev",
            "xfer_kv_layout", "xfer_kv_plan", "xfer_kv_pf_event", "xfer_kv_dec_stats"} <= declared
    missing = declared - set(_lib.STRUCTS)
    assert not missing, f"structs of xfer.h/xfer_kv.h not mirrored in python/xfer/_lib.py: {sorted(missing)}"


_CONSTANTS = {  # name -> C expression
    **{f"XFER_E{n}": f"XFER_E{n}" for n in ("BADWIRE", "VERSION", "FOREIGN", "PROVIDER", "PEER", "FABRIC", "NOGPU", "NOPROV")},
    **{f"XFER_OP_{n}": f"XFER_OP_{n}" for n in ("SEND", "WRITE", "PAGED", "IMM", "EXPECT", "CANCEL", "SCATTER", "BARRIER")},
    "XFER_F_IMM": "XFER_F_IMM",
    "XFER_F_SHARD": "XFER_F_SHARD",
    "XFER_F_PIN": "XFER_F_PIN",
    "XFER_F_NIC(3)": "XFER_F_NIC(3)",
    "XFER_PEER_LIVE": "XFER_PEER_LIVE",
    "XFER_PEER_DEAD": "XFER_PEER_DEAD",
    "XFER_PEER_NONE": "XFER_PEER_NONE",
    "XFER_ADDR_MAX": "XFER_ADDR_MAX",
    "XFER_DESC_MAX": "XFER_DESC_MAX",
    "XFER_DEV_NIC": "XFER_DEV_NIC",
    "XFER_DEV_GPU": "XFER_DEV_GPU",
    "XFER_CPU_AUTO": "XFER_CPU_AUTO",
    "XFER_STATS_CODES": "XFER_STATS_CODES",
    "XFER_STATS_BUCKETS": "XFER_STATS_BUCKETS",
    **{f"XFER_STATS_{n}": f"XFER_STATS_{n}" for n in (
        "EOTHER", "ETIMEDOUT", "ECANCELED", "EPEER", "ECONNRESET", "ECONNREFUSED", "ECONNABORTED", "EHOSTUNREACH",
        "ENOTCONN", "EPIPE", "EIO", "EFABRIC", "ENOSPC", "EBUSY", "EACCES", "ESHUTDOWN")},
    **{f"XFER_KV_{n}": f"XFER_KV_{n}" for n in (
        "GQA", "MLA", "TP_MAX", "HEADS_MAX", "SEGS_MAX", "APP_MAX", "GROUP_LIVE", "GROUP_LEFT", "GROUP_DEAD",
        "PF_NEW", "PF_CANCELLED", "PF_DONE", "PF_LEFT")},
}
_CONSTANTS_PY = {
    **{k: getattr(_lib, k) for k in _CONSTANTS if "(" not in k},
    "XFER_F_NIC(3)": _lib.XFER_F_NIC(3),
}


def ctypes_sizeof(cls) -> int:
    import ctypes

    return ctypes.sizeof(cls)


_RET = {
    "int": "c_int",
    "void": "None",
    "uint64_t": "c_ulong",
    "uint32_t": "c_uint",
    "unsigned": "c_uint",
    "size_t": "c_ulong",
    "const char *": "c_char_p",
    "void *": "c_void_p",
    "xfer_engine_t *": "c_void_p",
}


def test_function_prototypes_match_the_header(header_text: str) -> None:
    import ctypes

    text = re.sub(r"/\*.*?\*/", "", header_text, flags=re.S)
    text = re.sub(r"#[^\n]*", "", text)
    protos = {}
    for m in re.finditer(r"([A-Za-z_][\w\s\*]*?)\b(xfer_\w+)\s*\(([^()]*)\)\s*;", text):
        ret, name, args = " ".join(m.group(1).split()), m.group(2), m.group(3).strip()
        if ret.startswith("typedef"):
            continue
        n = 0 if args in ("", "void") else args.count(",") + 1
        protos[name] = (ret.replace(" *", " *").strip(), n)
    assert len(protos) > 60, "could not parse xfer.h and xfer_kv.h"
    wrong = []
    unbound = []
    for name, (ret, n) in protos.items():
        py_name = "xfer_scatter_submit" if name == "xfer_scatter" else name
        fn = getattr(_lib, py_name, None)
        if fn is None or not hasattr(fn, "argtypes") or isinstance(fn, type):
            unbound.append(name)
            continue
        if len(fn.argtypes) != n:
            wrong.append(f"{name}: {n} parameters in xfer.h, {len(fn.argtypes)} in _lib.py")
        want = _RET.get(ret.replace("const char*", "const char *"))
        got = "None" if fn.restype is None else fn.restype.__name__
        if want is not None and got != want and not (want == "c_ulong" and got in ("c_ulong", "c_size_t", "c_uint64")):
            wrong.append(f"{name}: returns {ret} in xfer.h, {got} in _lib.py")
    assert not wrong, "\n".join(wrong)
    # The binding ships with its library: every function of both headers is
    # bound (and the loaded library exports it).
    assert not unbound, f"functions of xfer.h/xfer_kv.h not bound in python/xfer/_lib.py: {sorted(unbound)}"
    required = {
        "xfer_engine_stop", "xfer_engine_nic_info", "xfer_engine_nic_name", "xfer_peer_state",
        "xfer_peer_shards", "xfer_mr_revoke", "xfer_cancel", "xfer_scatter", "xfer_barrier",
        "xfer_group_create", "xfer_group_destroy", "xfer_group_size", "xfer_engine_trace",
        "xfer_trace_read", "xfer_topology", "xfer_topology_nics_for_gpu",
        "xfer_watcher_create", "xfer_watcher_destroy", "xfer_watcher_word", "xfer_watcher_device_ptr",
        "xfer_peer_down_notify_fd", "xfer_kv_decoder_create", "xfer_kv_dec_admit", "xfer_kv_pf_bind",
        "xfer_kv_dec_stats", "xfer_kv_pf_stats",
    }
    assert required <= set(protos), f"the headers lost {sorted(required - set(protos))}"


# ------------------------------------------------------------------ topology


def test_topology_and_worker_pinning() -> None:
    try:
        devs = xfer.topology()
    except xfer.NotSupported:
        pytest.skip("libxfer was built without hwloc: no topology")
    assert all(isinstance(d, xfer.TopologyDevice) and d.kind in ("gpu", "nic") for d in devs)
    kinds = [d.kind for d in devs]
    assert kinds == sorted(kinds, key=lambda k: k != "gpu")  # GPUs first, then NICs
    assert all(isinstance(d.numa, int) and d.numa >= -1 and d.name for d in devs)
    gpus = [d for d in devs if d.kind == "gpu"]
    nics = {d.name for d in devs if d.kind == "nic"}
    assert [d.name for d in gpus] == [f"gpu{i}" for i in range(len(gpus))]
    for g in range(len(gpus)):
        near = xfer.nics_for_gpu(g)
        assert set(near) <= nics and (near or not nics)
    with pytest.raises(xfer.NoGPU):
        xfer.nics_for_gpu(len(gpus))
    with pytest.raises(xfer.InvalidArgument):
        xfer.nics_for_gpu(-1)
    # Pinning near the first NIC: "lo" has no locality, so the worker stays
    # unpinned, and the engine works.
    with make_engine("tcp", worker_cpu="auto") as a, make_engine("tcp", worker_cpu=xfer.CPU_AUTO) as b:
        peer = a.add_peer(b.address)
        b.add_peer(a.address)
        assert a.write_imm(peer, 1).result(10) == 0
    with pytest.raises(xfer.InvalidArgument):
        xfer.Engine(provider="tcp", nics="lo", worker_cpu=-3)


# ------------------------------------------------------------------ torch


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def test_torch_cpu_tensor_write() -> None:
    torch = _torch()
    if torch is None:
        pytest.skip("torch is not installed (pip install torch to run the torch tests)")
    with make_engine("tcp") as a, make_engine("tcp") as b:
        peer = a.add_peer(b.address)
        b.add_peer(a.address)
        src_t = torch.arange(4096, dtype=torch.float32)
        dst_t = torch.zeros(4096, dtype=torch.float32)
        src = a.register(src_t)
        dst_r = b.register(dst_t)
        assert src.ptr == src_t.data_ptr() and src.nbytes == 4096 * 4 and src.device == xfer.Device("cpu")
        dst = a.import_region(peer, dst_r.descriptor)
        idx = torch.arange(16, dtype=torch.int32).flip(0)
        exp = b.expect_imm(1, 17)
        a.write(src, dst, 1024, imm=1).result(10)
        a.write_paged(src, dst, idx, torch.arange(16, dtype=torch.int32), 1024, imm=1).result(10)
        exp.result(10)
        want = src_t.view(16, 256).flip(0).reshape(-1)
        assert torch.equal(dst_t, want)
        with pytest.raises(xfer.InvalidArgument):
            a.register(torch.zeros(4, 4).t())  # not contiguous


def test_torch_cuda_tensor_round_trip() -> None:
    """A CUDA tensor registers as GPU memory and a write into it (through the
    engine's host mirror, one process) lands on the GPU."""
    torch = _torch()
    if torch is None:
        pytest.skip("torch is not installed: the CUDA registration test needs torch with CUDA")
    if not torch.cuda.is_available():
        pytest.skip("CUDA is not available here (torch.cuda.is_available() is False)")
    src_t = torch.arange(4096, dtype=torch.uint8, device="cuda")
    dst_t = torch.zeros(4096, dtype=torch.uint8, device="cuda")
    with make_engine("tcp") as a, make_engine("tcp") as b:
        src = a.register(src_t)
        dst = b.register(dst_t)
        assert src.gpu == 0 and dst.gpu == 0
        peer = a.add_peer(b.address)
        b.add_peer(a.address)
        rdst = a.import_region(peer, dst.descriptor)
        exp = b.expect_imm(5, 1)
        a.write(src, rdst, 4096, imm=5).result(30)
        exp.result(30)
        torch.cuda.synchronize()
        assert torch.equal(dst_t, src_t)
