"""Loading libxfer and declaring its whole C API for ctypes: ``include/xfer.h``
and ``include/xfer_kv.h``, every structure, constant and prototype, in one
table that every module of the package (``kv.py`` included) uses.

The structures mirror the headers field for field; ``python/tests/test_misc.py``
compiles a probe against both headers and compares every structure's size
and field offsets, the constants and the prototypes, so a change in a header
that is not mirrored here fails loudly. The binding ships with its library:
a missing function is an error at import, never a silent ``None``.

Two handles to the same shared object are kept:

* ``clib`` (:class:`ctypes.CDLL`) releases the GIL around every call. It is
  used for everything that can block or wait for the worker thread
  (registration, peer management, completion and receive waits, the KV
  module's calls).
* ``plib`` (:class:`ctypes.PyDLL`) keeps the GIL. It is used only for the
  submission functions, which never block (they validate, push into a
  lock-free queue and return), so that a submit costs no GIL hand-off.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import struct
import sys
from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    c_char,
    c_char_p,
    c_int,
    c_int32,
    c_size_t,
    c_uint,
    c_uint8,
    c_uint32,
    c_uint64,
    c_void_p,
)
from pathlib import Path
from typing import Any, Dict, List, Tuple, Type

# ------------------------------------------------------------------ constants

XFER_EBADWIRE = 257
XFER_EVERSION = 258
XFER_EFOREIGN = 259
XFER_EPROVIDER = 260
XFER_EPEER = 261
XFER_EFABRIC = 262
XFER_ENOGPU = 263
XFER_ENOPROV = 264

XFER_ADDR_MAX = 2048
XFER_DESC_MAX = 512
XFER_PEER_NONE = 0xFFFFFFFF

XFER_OP_SEND = 1
XFER_OP_WRITE = 2
XFER_OP_PAGED = 3
XFER_OP_IMM = 4
XFER_OP_EXPECT = 5
XFER_OP_CANCEL = 6
XFER_OP_SCATTER = 7
XFER_OP_BARRIER = 8

XFER_F_IMM = 1 << 0
XFER_F_SHARD = 1 << 1
XFER_F_PIN = 1 << 2


def XFER_F_NIC(n: int) -> int:
    """Flags that pin every request of a write to NIC ``n``."""
    return XFER_F_PIN | ((n & 0xFF) << 8)


XFER_PEER_LIVE = 1
XFER_PEER_DEAD = 2

XFER_DEV_NIC = 1
XFER_DEV_GPU = 2
XFER_CPU_AUTO = -2  # worker_cpu: pin the worker near its first NIC (NUMA node)

# xfer_kv.h
XFER_KV_GQA = 1
XFER_KV_MLA = 2
XFER_KV_TP_MAX = 64
XFER_KV_HEADS_MAX = 256
XFER_KV_SEGS_MAX = 2 * XFER_KV_HEADS_MAX
XFER_KV_APP_MAX = 1024
XFER_KV_GROUP_LIVE = 1
XFER_KV_GROUP_LEFT = 2
XFER_KV_GROUP_DEAD = 3
XFER_KV_PF_NEW = 1
XFER_KV_PF_CANCELLED = 2
XFER_KV_PF_DONE = 3
XFER_KV_PF_LEFT = 4

# ------------------------------------------------------ structures: xfer.h

xfer_recv_fn = CFUNCTYPE(None, c_void_p, c_uint64, c_void_p, c_size_t)
xfer_peer_down_fn = CFUNCTYPE(None, c_void_p, c_uint32, c_uint64, c_int)
xfer_watch_fn = CFUNCTYPE(None, c_void_p, c_uint64, c_uint64)


class xfer_attr(Structure):
    _fields_ = [
        ("provider", c_char_p),
        ("nics", c_char_p),
        ("worker_cpu", c_int),
        ("submit_depth", c_uint32),
        ("max_ops", c_uint32),
        ("recv_count", c_uint32),
        ("msg_max", c_uint32),
        ("imm_slots", c_uint32),
        ("max_regions", c_uint32),
        ("spin_us", c_uint32),
        ("busy_poll", c_uint32),
        ("timeout_ms", c_uint64),
        ("log_level", c_int),
        ("on_recv", c_void_p),
        ("on_recv_ctx", c_void_p),
        ("heartbeat_ms", c_uint32),
        ("heartbeat_misses", c_uint32),
        ("on_peer_down", c_void_p),
        ("on_peer_down_ctx", c_void_p),
    ]


class xfer_cqe(Structure):
    _fields_ = [("user_data", c_uint64), ("res", c_int32), ("kind", c_uint32)]


class xfer_completion(Structure):
    _fields_ = [
        ("user_data", c_uint64),
        ("cb", c_void_p),
        ("cb_ctx", c_void_p),
        ("timeout_ms", c_uint64),
        ("tag", c_uint64),
        ("signal", c_void_p),  # volatile uint64_t *: stored just before delivery
        ("signal_value", c_uint64),
    ]


class xfer_write_t(Structure):
    _fields_ = [
        ("src", c_void_p),
        ("src_off", c_uint64),
        ("dst", c_void_p),
        ("dst_off", c_uint64),
        ("len", c_uint64),
        ("imm", c_uint32),
        ("flags", c_uint32),
    ]


class xfer_paged_write_t(Structure):
    _fields_ = [
        ("src", c_void_p),
        ("dst", c_void_p),
        ("page_len", c_uint64),
        ("src_pages", c_void_p),
        ("src_stride", c_uint64),
        ("src_base", c_uint64),
        ("dst_pages", c_void_p),
        ("dst_stride", c_uint64),
        ("dst_base", c_uint64),
        ("npages", c_uint32),
        ("imm", c_uint32),
        ("flags", c_uint32),
    ]


class xfer_scatter_entry(Structure):
    _fields_ = [
        ("member", c_uint32),
        ("src_off", c_uint64),
        ("len", c_uint64),
        ("dst", c_void_p),
        ("dst_off", c_uint64),
    ]


class xfer_scatter_t(Structure):
    _fields_ = [
        ("src", c_void_p),
        ("entries", c_void_p),
        ("n", c_uint32),
        ("imm", c_uint32),
        ("flags", c_uint32),
        ("status", c_void_p),
    ]


class xfer_nic_info(Structure):
    _fields_ = [
        ("provider", c_char * 32),
        ("domain", c_char * 64),
        ("tx_depth", c_uint32),
        ("rx_depth", c_uint32),
        ("max_msg", c_uint64),
        ("delivery_complete", c_int),
        ("gpu_path", c_char_p),
    ]


class xfer_topo_dev(Structure):
    _fields_ = [
        ("kind", c_int),
        ("name", c_char * 64),
        ("pci", c_char * 16),
        ("numa", c_int),
    ]


class xfer_msg_info(Structure):
    _fields_ = [("src_id", c_uint64), ("len", c_size_t)]


class xfer_stats(Structure):
    _fields_ = [
        ("ops_submitted", c_uint64),
        ("ops_completed", c_uint64),
        ("ops_failed", c_uint64),
        ("wrs_posted", c_uint64),
        ("bytes_written", c_uint64),
        ("imms_received", c_uint64),
        ("imms_dropped", c_uint64),
        ("msgs_received", c_uint64),
        ("worker_sleeps", c_uint64),
    ]


class xfer_trace(Structure):
    _fields_ = [
        ("user_data", c_uint64),
        ("kind", c_uint32),
        ("wrs", c_uint32),
        ("t_call", c_uint64),
        ("t_enq", c_uint64),
        ("t_deq", c_uint64),
        ("t_first", c_uint64),
        ("t_last", c_uint64),
        ("t_done", c_uint64),
        ("t_first_ret", c_uint64),
    ]


# --------------------------------------------------- structures: xfer_kv.h


class xfer_kv_layout(Structure):
    _fields_ = [(n, c_uint32) for n in (
        "kind", "layers", "pages", "page_tokens", "kv_heads", "head_dim", "dtype_bytes", "fused",
        "tp_size", "tp_rank")]


class xfer_kv_seg(Structure):
    _fields_ = [("src_off", c_uint64), ("dst_off", c_uint64), ("len", c_uint64)]


class xfer_kv_plan_t(Structure):
    _fields_ = [
        ("nsegs", c_uint32),
        ("writes_ctx", c_uint32),
        ("src_layer_stride", c_uint64),
        ("dst_layer_stride", c_uint64),
        ("src_page_stride", c_uint64),
        ("dst_page_stride", c_uint64),
        ("segs", xfer_kv_seg * XFER_KV_SEGS_MAX),
    ]


class xfer_kv_dec_config(Structure):
    _fields_ = [
        ("layout", xfer_kv_layout),
        ("kv", c_void_p),
        ("ctx_bytes", c_uint32),
        ("max_requests", c_uint32),
        ("imm_base", c_uint32),
        ("imm_span", c_uint32),
        ("cancel_ms", c_uint64),
    ]


class xfer_kv_rank(Structure):
    _fields_ = [("addr", c_void_p), ("addr_len", c_size_t), ("layout", xfer_kv_layout)]


class xfer_kv_request(Structure):
    _fields_ = [
        ("id", c_uint64),
        ("group", c_uint32),
        ("tokens", c_uint32),
        ("timeout_ms", c_uint64),
        ("app", c_void_p),
        ("app_len", c_uint32),
    ]


class xfer_kv_dec_event(Structure):
    _fields_ = [
        ("id", c_uint64),
        ("status", c_int32),
        ("npages", c_uint32),
        ("pages", POINTER(c_uint32)),
        ("ctx", c_void_p),
        ("elapsed_ns", c_uint64),
    ]


class xfer_kv_dec_stats_t(Structure):
    _fields_ = [(n, c_uint64) for n in (
        "admitted", "completed", "failed", "cancelled", "cancel_acks", "revocations",
        "bytes_expected", "msgs_dropped")]


class xfer_kv_pf_config(Structure):
    _fields_ = [
        ("layout", xfer_kv_layout),
        ("kv", c_void_p),
        ("ctx_bytes", c_uint32),
        ("max_jobs", c_uint32),
        ("job_timeout_ms", c_uint64),
    ]


class xfer_kv_pf_event(Structure):
    _fields_ = [
        ("type", c_uint32),
        ("status", c_int32),
        ("id", c_uint64),
        ("tokens", c_uint32),
        ("npages", c_uint32),
        ("app_len", c_uint32),
        ("app", c_uint8 * XFER_KV_APP_MAX),
    ]


class xfer_kv_pf_stats_t(Structure):
    _fields_ = [(n, c_uint64) for n in (
        "jobs", "jobs_failed", "requests", "cancels", "writes", "bytes", "writes_cut", "msgs_dropped")]


#: Every structure mirrored from xfer.h and xfer_kv.h, by its C name (the ABI test).
STRUCTS: Dict[str, Type[Structure]] = {
    "xfer_attr": xfer_attr,
    "xfer_cqe": xfer_cqe,
    "xfer_completion": xfer_completion,
    "xfer_write": xfer_write_t,
    "xfer_paged_write": xfer_paged_write_t,
    "xfer_scatter_entry": xfer_scatter_entry,
    "xfer_scatter": xfer_scatter_t,
    "xfer_nic_info": xfer_nic_info,
    "xfer_topo_dev": xfer_topo_dev,
    "xfer_msg_info": xfer_msg_info,
    "xfer_stats": xfer_stats,
    "xfer_trace": xfer_trace,
    "xfer_kv_layout": xfer_kv_layout,
    "xfer_kv_seg": xfer_kv_seg,
    "xfer_kv_plan": xfer_kv_plan_t,
    "xfer_kv_dec_config": xfer_kv_dec_config,
    "xfer_kv_rank": xfer_kv_rank,
    "xfer_kv_request": xfer_kv_request,
    "xfer_kv_dec_event": xfer_kv_dec_event,
    "xfer_kv_dec_stats": xfer_kv_dec_stats_t,
    "xfer_kv_pf_config": xfer_kv_pf_config,
    "xfer_kv_pf_event": xfer_kv_pf_event,
    "xfer_kv_pf_stats": xfer_kv_pf_stats_t,
}


def packer(cls: Type[Structure]) -> "struct.Struct":
    """A struct.Struct that writes `cls` from its fields in declaration order.

    Packing a whole submission with one ``pack_into`` costs a fraction of
    setting ctypes fields one by one; the format is derived from the ctypes
    layout (itself checked against xfer.h by the tests), pointers as 'Q'.
    """
    fmt, pos = "<", 0
    for name, ctype in cls._fields_:  # type: ignore[misc]
        f = getattr(cls, name)
        if f.offset > pos:
            fmt += f"{f.offset - pos}x"
        if ctype in (c_void_p, c_char_p, c_uint64, c_size_t) or (
            isinstance(ctype, type) and issubclass(ctype, ctypes._Pointer)
        ):
            code = "Q"
        elif ctype is c_uint32 or ctype is c_uint:
            code = "I"
        elif ctype is c_int32 or ctype is c_int:
            code = "i"
        else:
            raise TypeError(f"{cls.__name__}.{name}: no pack code for {ctype}")
        if struct.calcsize("<" + code) != f.size:
            raise TypeError(f"{cls.__name__}.{name}: size mismatch")
        fmt += code
        pos = f.offset + f.size
    size = ctypes.sizeof(cls)
    if size > pos:
        fmt += f"{size - pos}x"
    st = struct.Struct(fmt)
    assert st.size == size, (cls.__name__, st.size, size)
    return st


# -------------------------------------------------------------------- loading


class LibraryNotFound(ImportError):
    """libxfer.so could not be found or loaded."""


def _candidates() -> List[Tuple[str, str]]:
    """(how it was found, path or name), in lookup order.

    The wheel carries its own copy (xfer/lib/libxfer.so.0, put there by
    `pip install .`); a source checkout uses the repository's build/.
    """
    out: List[Tuple[str, str]] = []
    env = os.environ.get("XFER_LIBRARY")
    if env:
        out.append(("$XFER_LIBRARY", env))
        return out  # an explicit choice is never second-guessed
    here = Path(__file__).resolve().parent
    for p in sorted((here / "lib").glob("libxfer.so*")):
        out.append(("bundled copy", str(p)))
    # Development: python/xfer/_lib.py -> <repo>/build/libxfer.so
    out.append(("repository build", str(here.parent.parent / "build" / "libxfer.so")))
    found = ctypes.util.find_library("xfer")  # an installed libxfer.so.0 (make install)
    if found:
        out.append(("ctypes.util.find_library", found))
    return out


def _load() -> Tuple[ctypes.CDLL, ctypes.PyDLL, str]:
    tried = []
    for how, path in _candidates():
        is_path = os.sep in path
        if is_path and not os.path.exists(path):
            tried.append(f"  {how}: {path} (does not exist)")
            continue
        try:
            c = ctypes.CDLL(path)
            p = ctypes.PyDLL(path)
        except OSError as ex:
            tried.append(f"  {how}: {path} ({ex})")
            if how == "$XFER_LIBRARY":
                break
            continue
        return c, p, path
    if not tried:
        tried.append("  ctypes.util.find_library('xfer'): nothing")
    raise LibraryNotFound(
        "cannot load libxfer.so. Looked, in order, at:\n"
        + "\n".join(tried)
        + "\nInstall the package with its library (`pip install .` in the repository), build it"
        " with `make`, or point XFER_LIBRARY at libxfer.so. libxfer needs libfabric and hwloc"
        " (Debian: apt-get install libfabric1 libhwloc15)."
    )


clib, plib, LIBRARY_PATH = _load()


def _proto(lib: ctypes.CDLL, name: str, restype: Any, *argtypes: Any) -> Any:
    try:
        fn = getattr(lib, name)
    except AttributeError:
        raise LibraryNotFound(f"{LIBRARY_PATH} lacks {name}: it is older than this binding") from None
    fn.restype = restype
    fn.argtypes = list(argtypes)
    return fn


P = c_void_p
_Layout = POINTER(xfer_kv_layout)

# ------------------------------------------------------ prototypes: xfer.h

xfer_strerror = _proto(clib, "xfer_strerror", c_char_p, c_int)
xfer_attr_init = _proto(clib, "xfer_attr_init", None, POINTER(xfer_attr))
xfer_engine_create = _proto(clib, "xfer_engine_create", c_int, POINTER(xfer_attr), POINTER(c_void_p))
xfer_engine_stop = _proto(clib, "xfer_engine_stop", None, P)
xfer_engine_destroy = _proto(clib, "xfer_engine_destroy", None, P)
xfer_engine_id = _proto(clib, "xfer_engine_id", c_uint64, P)
xfer_engine_provider = _proto(clib, "xfer_engine_provider", c_char_p, P)
xfer_engine_nic_count = _proto(clib, "xfer_engine_nic_count", c_uint, P)
xfer_engine_nic_name = _proto(clib, "xfer_engine_nic_name", c_char_p, P, c_uint)
xfer_engine_nic_info = _proto(clib, "xfer_engine_nic_info", c_int, P, c_uint, POINTER(xfer_nic_info))
xfer_engine_addr = _proto(clib, "xfer_engine_addr", c_int, P, P, c_size_t, POINTER(c_size_t))
xfer_peer_add = _proto(clib, "xfer_peer_add", c_int, P, P, c_size_t, POINTER(c_uint32))
xfer_peer_remove = _proto(clib, "xfer_peer_remove", c_int, P, c_uint32)
xfer_peer_id = _proto(clib, "xfer_peer_id", c_uint64, P, c_uint32)
xfer_peer_state = _proto(clib, "xfer_peer_state", c_int, P, c_uint32)
xfer_peer_shards = _proto(clib, "xfer_peer_shards", c_uint, P, c_uint32)
# Never called from Python: its address is the on_peer_down handler (see _core.PeerDownSignal).
xfer_peer_down_notify_fd = _proto(clib, "xfer_peer_down_notify_fd", None, P, c_uint32, c_uint64, c_int)
xfer_mr_reg = _proto(clib, "xfer_mr_reg", c_int, P, P, c_size_t, POINTER(c_void_p))
xfer_mr_dereg = _proto(clib, "xfer_mr_dereg", c_int, P)
xfer_mr_is_gpu = _proto(clib, "xfer_mr_is_gpu", c_int, P)
xfer_cuda_available = _proto(clib, "xfer_cuda_available", c_int)
xfer_mr_revoke = _proto(clib, "xfer_mr_revoke", c_int, P)
xfer_mr_desc = _proto(clib, "xfer_mr_desc", c_int, P, P, c_size_t, POINTER(c_size_t))
xfer_mr_addr = _proto(clib, "xfer_mr_addr", c_void_p, P)
xfer_mr_len = _proto(clib, "xfer_mr_len", c_size_t, P)
xfer_rmr_import = _proto(clib, "xfer_rmr_import", c_int, P, c_uint32, P, c_size_t, POINTER(c_void_p))
xfer_rmr_free = _proto(clib, "xfer_rmr_free", None, P)
xfer_rmr_len = _proto(clib, "xfer_rmr_len", c_size_t, P)
xfer_imm_disarm = _proto(clib, "xfer_imm_disarm", c_int, P, c_uint32, POINTER(c_uint32))
xfer_cq_poll = _proto(clib, "xfer_cq_poll", c_int, P, P, c_int)
xfer_cq_wait = _proto(clib, "xfer_cq_wait", c_int, P, P, c_int, c_uint64)
xfer_recv = _proto(clib, "xfer_recv", c_int, P, P, c_size_t, P)
xfer_recv_wait = _proto(clib, "xfer_recv_wait", c_int, P, P, c_size_t, P, c_uint64)
xfer_engine_stats = _proto(clib, "xfer_engine_stats", None, P, POINTER(xfer_stats))
xfer_engine_trace = _proto(clib, "xfer_engine_trace", None, P, c_int)
xfer_trace_read = _proto(clib, "xfer_trace_read", c_int, P, P, c_int)
xfer_topology = _proto(clib, "xfer_topology", c_int, POINTER(xfer_topo_dev), c_int)
xfer_topology_nics_for_gpu = _proto(clib, "xfer_topology_nics_for_gpu", c_int, c_int, c_char_p, c_size_t)
xfer_group_create = _proto(clib, "xfer_group_create", c_int, P, P, c_uint32, POINTER(c_void_p))
xfer_group_destroy = _proto(clib, "xfer_group_destroy", c_int, P)
xfer_group_size = _proto(clib, "xfer_group_size", c_uint32, P)
# The watcher: create and destroy go through clib, which releases the GIL.
# destroy joins the watcher thread, and that thread may be waiting for the
# GIL to run a Python callback: holding it here would deadlock.
xfer_watcher_create = _proto(clib, "xfer_watcher_create", c_int, xfer_watch_fn, c_void_p, c_uint32, POINTER(c_void_p))
xfer_watcher_destroy = _proto(clib, "xfer_watcher_destroy", None, P)
xfer_watcher_word = _proto(clib, "xfer_watcher_word", c_void_p, P)
xfer_watcher_device_ptr = _proto(clib, "xfer_watcher_device_ptr", c_uint64, P)

# Submissions: never block, so they keep the GIL (see the module docstring).
xfer_send = _proto(plib, "xfer_send", c_int, P, c_uint32, P, c_size_t, P)
xfer_write = _proto(plib, "xfer_write", c_int, P, P, P)
xfer_write_paged = _proto(plib, "xfer_write_paged", c_int, P, P, P)
xfer_write_imm = _proto(plib, "xfer_write_imm", c_int, P, c_uint32, c_uint32, P)
xfer_expect_imm = _proto(plib, "xfer_expect_imm", c_int, P, c_uint32, c_uint32, P)
xfer_cancel = _proto(plib, "xfer_cancel", c_int, P, c_uint64, P)
xfer_scatter_submit = _proto(plib, "xfer_scatter", c_int, P, P, P, P)
xfer_barrier = _proto(plib, "xfer_barrier", c_int, P, P, c_uint32, P)

# Version and logging (xfer/_log.py routes the log lines into `logging`).
xfer_version = _proto(clib, "xfer_version", c_char_p)
xfer_log_fn = CFUNCTYPE(None, c_void_p, c_int, c_char_p)
# Through clib: the setter waits until no thread is inside the old handler,
# and a worker inside a Python handler needs the GIL to get out.
xfer_log_set_handler = _proto(clib, "xfer_log_set_handler", None, c_void_p, c_void_p)
LIBRARY_VERSION: str = xfer_version().decode()

from ._version import __version__ as _binding_version  # noqa: E402

if LIBRARY_VERSION != _binding_version:
    raise LibraryNotFound(
        f"{LIBRARY_PATH} is libxfer {LIBRARY_VERSION}, this binding is {_binding_version}: the"
        " structures mirrored here are those of one version. Use the library the package was"
        " built with (unset XFER_LIBRARY, or rebuild)."
    )


# --------------------------------------------------- prototypes: xfer_kv.h
# All through clib: admission may wait for the module, polls wait for events,
# and creation and destruction start and join threads.

xfer_kv_layout_check = _proto(clib, "xfer_kv_layout_check", c_int, _Layout)
xfer_kv_layout_why = _proto(clib, "xfer_kv_layout_why", c_char_p, _Layout)
xfer_kv_layout_bytes = _proto(clib, "xfer_kv_layout_bytes", c_uint64, _Layout)
xfer_kv_local_heads = _proto(clib, "xfer_kv_local_heads", c_uint32, _Layout, POINTER(c_uint32))
xfer_kv_offset = _proto(clib, "xfer_kv_offset", c_uint64, _Layout, c_uint32, c_uint32, c_uint32, c_uint32)
xfer_kv_head_bytes = _proto(clib, "xfer_kv_head_bytes", c_uint64, _Layout)
xfer_kv_plan = _proto(clib, "xfer_kv_plan", c_int, _Layout, _Layout, POINTER(xfer_kv_plan_t))
xfer_kv_plan_count = _proto(clib, "xfer_kv_plan_count", c_uint64, POINTER(xfer_kv_plan_t), c_uint32, c_uint32)
xfer_kv_dec_config_init = _proto(clib, "xfer_kv_dec_config_init", None, POINTER(xfer_kv_dec_config))
xfer_kv_decoder_create = _proto(
    clib, "xfer_kv_decoder_create", c_int, POINTER(xfer_kv_dec_config), POINTER(xfer_attr), POINTER(c_void_p)
)
xfer_kv_decoder_destroy = _proto(clib, "xfer_kv_decoder_destroy", None, P)
xfer_kv_decoder_engine = _proto(clib, "xfer_kv_decoder_engine", P, P)
xfer_kv_dec_join = _proto(clib, "xfer_kv_dec_join", c_int, P, POINTER(xfer_kv_rank), c_uint32, POINTER(c_uint32))
xfer_kv_dec_leave = _proto(clib, "xfer_kv_dec_leave", c_int, P, c_uint32)
xfer_kv_dec_group_state = _proto(clib, "xfer_kv_dec_group_state", c_int, P, c_uint32)
xfer_kv_dec_admit = _proto(clib, "xfer_kv_dec_admit", c_int, P, POINTER(xfer_kv_request))
xfer_kv_dec_cancel = _proto(clib, "xfer_kv_dec_cancel", c_int, P, c_uint64)
xfer_kv_dec_poll = _proto(clib, "xfer_kv_dec_poll", c_int, P, POINTER(xfer_kv_dec_event), c_int, c_uint64)
xfer_kv_dec_release = _proto(clib, "xfer_kv_dec_release", c_int, P, c_uint64)
xfer_kv_dec_pages = _proto(
    clib, "xfer_kv_dec_pages", c_int, P, c_uint64, POINTER(POINTER(c_uint32)), POINTER(c_uint32)
)
xfer_kv_dec_free_pages = _proto(clib, "xfer_kv_dec_free_pages", c_uint32, P)
xfer_kv_dec_stats = _proto(clib, "xfer_kv_dec_stats", None, P, POINTER(xfer_kv_dec_stats_t))
xfer_kv_pf_config_init = _proto(clib, "xfer_kv_pf_config_init", None, POINTER(xfer_kv_pf_config))
xfer_kv_prefiller_create = _proto(
    clib, "xfer_kv_prefiller_create", c_int, POINTER(xfer_kv_pf_config), POINTER(xfer_attr), POINTER(c_void_p)
)
xfer_kv_prefiller_destroy = _proto(clib, "xfer_kv_prefiller_destroy", None, P)
xfer_kv_prefiller_engine = _proto(clib, "xfer_kv_prefiller_engine", P, P)
xfer_kv_pf_poll = _proto(clib, "xfer_kv_pf_poll", c_int, P, POINTER(xfer_kv_pf_event), c_int, c_uint64)
xfer_kv_pf_bind = _proto(clib, "xfer_kv_pf_bind", c_int, P, c_uint64, POINTER(c_uint32), c_uint32)
xfer_kv_pf_layers_done = _proto(clib, "xfer_kv_pf_layers_done", c_int, P, c_uint64, c_uint32)
xfer_kv_pf_finish = _proto(clib, "xfer_kv_pf_finish", c_int, P, c_uint64, c_void_p, c_uint32)
xfer_kv_pf_leave = _proto(clib, "xfer_kv_pf_leave", c_int, P)
xfer_kv_pf_stats = _proto(clib, "xfer_kv_pf_stats", None, P, POINTER(xfer_kv_pf_stats_t))

#: The C function pointer handed to the engine as on_peer_down.
PEER_DOWN_NOTIFY_FD: int = ctypes.cast(xfer_peer_down_notify_fd, c_void_p).value or 0


def strerror(code: int) -> str:
    """The library's message for an error code (negative or positive)."""
    s = xfer_strerror(int(code))
    return s.decode("utf-8", "replace") if s else f"error {code}"


def defaults() -> xfer_attr:
    """A fresh xfer_attr with the library defaults and XFER_* environment applied."""
    a = xfer_attr()
    xfer_attr_init(ctypes.byref(a))
    return a


if sys.byteorder != "little":  # pragma: no cover - xfer targets x86-64/aarch64
    raise ImportError("xfer's Python binding assumes a little-endian machine")
