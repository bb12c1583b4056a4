"""ctypes mirror of include/xfer_moe.h (in libxfer) and src/moe/cuda/moe_cuda.h
(libxfer_moe_cuda.so, the GPU half, loaded on first use).

Only xfer.moe uses this. Prototypes are bound lazily so that ``import xfer``
works with a libxfer built without the MoE module; the first MoE call then
says what is missing.
"""
from __future__ import annotations

import ctypes
import os
from ctypes import POINTER, Structure, c_char_p, c_int, c_int32, c_size_t, c_uint32, c_uint64, c_void_p
from pathlib import Path
from typing import Any, List, Optional

from . import _lib
from ._errors import NotSupported

PADDED, PACKED = 0, 1
WAIT_KERNEL, WAIT_STREAM = 0, 1
AUTO = 0xFFFFFFFF  # XFER_MOE_AUTO
SCALE_BLOCK = 128
# xfer_moe_cuda_trace (XFER_MOE_TRACE=1): rounds kept, and the points of a round in launch order
TRACE_ROUNDS = 1024
TRACE_POINTS = ("route", "wait_send", "pack", "wait_recv", "plan", "shuffle", "wait_csend", "comb_send",
                "wait_crecv", "comb_recv")
TOPK_MAX = 32
CUDA_VERSION = 3  # XFER_MOE_CUDA_VERSION: the libxfer_moe_cuda.so this binding speaks to


class Config(Structure):
    _fields_ = [(n, c_uint32) for n in (
        "world_size", "rank", "num_experts", "topk", "hidden", "max_tokens", "dispatch_bytes",
        "scales", "combine_bytes", "private_tokens", "overflow_tokens", "layout",
        "expert_capacity", "expert_align")] + [("timeout_ms", c_uint64), ("host_of", POINTER(c_uint32))]


class Sizes(Structure):
    _fields_ = [(n, c_uint32) for n in (
        "local_experts", "record_bytes", "payload_bytes", "scale_bytes", "meta_bytes",
        "combine_row_bytes", "route_words", "remote_ranks")] + [(n, c_uint64) for n in (
        "send_records", "recv_records", "expert_rows", "comb_send_rows", "comb_recv_rows",
        "send_bytes", "recv_bytes", "comb_send_bytes", "comb_recv_bytes", "route_vec_bytes",
        "route_table_bytes")]


class Buffers(Structure):
    _fields_ = [(n, c_void_p) for n in (
        "send", "recv", "comb_send", "comb_recv", "route_vec", "route_table", "ctl")]


class Ctl(Structure):
    _fields_ = [(n, c_uint32) for n in (
        "k_route", "k_packed", "k_recv_done", "k_comb_packed", "k_comb_done", "k_error",
        "k_error_info", "round")] + [("pad0", c_uint32 * 8)] + [(n, c_uint32) for n in (
        "recv_flag", "comb_flag", "tx_ready", "comb_tx_ready")] + [
        ("p_error", c_int32), ("p_error_rank", c_uint32), ("pad1", c_uint32 * 10)]


class Stats(Structure):
    _fields_ = [(n, c_uint64) for n in (
        "rounds", "combines", "busy_ns", "route_to_rows_ns", "route_to_recv_ns", "comb_to_flag_ns",
        "private_records", "overflow_records", "bytes_sent")]


class Tokens(Structure):
    _fields_ = [("n", c_uint32), ("x", c_void_p), ("scales", c_void_p), ("topk_idx", c_void_p),
                ("idx_bytes", c_uint32)]


class ExpertOut(Structure):
    _fields_ = [(n, c_void_p) for n in ("x", "scales", "counts", "offsets", "src_rank", "src_token")]


STRUCTS = {"xfer_moe_config": Config, "xfer_moe_sizes": Sizes, "xfer_moe_buffers": Buffers,
           "xfer_moe_ctl": Ctl, "xfer_moe_stats": Stats, "xfer_moe_tokens": Tokens,
           "xfer_moe_expert_out": ExpertOut}

P = c_void_p
_PROTOS = {
    "xfer_moe_config_init": (None, POINTER(Config)),
    "xfer_moe_config_check": (c_int, POINTER(Config)),
    "xfer_moe_config_why": (c_char_p, POINTER(Config)),
    "xfer_moe_config_resolve": (None, POINTER(Config)),
    "xfer_moe_sizes": (c_int, POINTER(Config), POINTER(Sizes)),
    "xfer_moe_create": (c_int, POINTER(Config), POINTER(_lib.xfer_attr), POINTER(Buffers), POINTER(P)),
    "xfer_moe_set_release": (None, P, P, P),
    "xfer_moe_local_info": (c_int, P, P, c_size_t, POINTER(c_size_t)),
    "xfer_moe_connect": (c_int, P, POINTER(P), POINTER(c_size_t)),
    "xfer_moe_status": (c_int, P, c_char_p, c_size_t, POINTER(c_uint32)),
    "xfer_moe_get_buffers": (None, P, POINTER(Buffers)),
    "xfer_moe_engine": (P, P),
    "xfer_moe_destroy": (None, P),
    "xfer_moe_get_stats": (None, P, POINTER(Stats)),
    "xfer_moe_debug_state": (c_int, P, c_char_p, c_size_t),
    "xfer_moe_cpu_dispatch_send": (c_int, P, POINTER(Tokens)),
    "xfer_moe_cpu_dispatch_recv": (c_int, P, POINTER(ExpertOut)),
    "xfer_moe_cpu_combine_send": (c_int, P, P),
    "xfer_moe_cpu_combine_recv": (c_int, P, P, P),
}

_CUDA_PROTOS = {
    "xfer_moe_cuda_version": (c_int,),
    "xfer_moe_cuda_error": (c_char_p,),
    "xfer_moe_cuda_create": (c_int, POINTER(Config), c_int, c_int, POINTER(Buffers), POINTER(P)),
    "xfer_moe_cuda_ipc_info": (c_int, P, P, c_size_t),
    "xfer_moe_cuda_connect": (c_int, P, POINTER(P), POINTER(c_size_t)),
    "xfer_moe_cuda_dispatch_send": (c_int, P, c_uint32, P, P, c_int, P, c_int, c_uint64),
    "xfer_moe_cuda_dispatch_recv": (c_int, P, P, P, P, P, P, P, c_uint64),
    "xfer_moe_cuda_combine_send": (c_int, P, P, c_uint64),
    "xfer_moe_cuda_combine_recv": (c_int, P, c_uint32, P, P, c_uint64),
    "xfer_moe_cuda_stamp": (c_int, P, c_uint64),
    "xfer_moe_cuda_mps_enabled": (c_int, c_int),
    "xfer_moe_cuda_kernels_loaded": (c_int, P),
    "xfer_moe_cuda_debug": (c_int, P, c_char_p, c_size_t),
    "xfer_moe_cuda_trace": (c_int, P, P, c_size_t),
    "xfer_moe_cuda_release": (None, P),
    "xfer_moe_cuda_destroy": (None, P),
}


class _Lazy:
    """Functions of one library, bound on first use."""

    def __init__(self, lib_fn, protos, what: str):
        self._lib_fn, self._protos, self._what = lib_fn, protos, what
        self._bound = {}

    def __getattr__(self, name: str):
        full = "xfer_moe_" + name
        fn = self._bound.get(full)
        if fn is None:
            if full not in self._protos:
                raise AttributeError(name)
            lib = self._lib_fn()
            try:
                fn = getattr(lib, full)
            except AttributeError:
                raise NotSupported(95, f"{self._what} lacks {full}: it was built without the MoE module "
                                   "or is older than this binding", full) from None
            res, *args = self._protos[full]
            fn.restype = res
            fn.argtypes = args
            self._bound[full] = fn
        return fn


f = _Lazy(lambda: _lib.clib, _PROTOS, _lib.LIBRARY_PATH)

_cuda_lib: Optional[ctypes.CDLL] = None
_cuda_why: Optional[str] = None
CUDA_LIBRARY_PATH: Optional[str] = None


def _cuda_candidates() -> List[str]:
    env = os.environ.get("XFER_MOE_CUDA_LIBRARY")
    if env:
        return [env]
    here = Path(__file__).resolve().parent
    out = [str(Path(_lib.LIBRARY_PATH).resolve().parent / "libxfer_moe_cuda.so")]
    out += [str(p) for p in sorted((here / "lib").glob("libxfer_moe_cuda.so*"))]
    out.append(str(here.parent.parent / "build" / "libxfer_moe_cuda.so"))
    return out


def cuda_lib() -> ctypes.CDLL:
    """libxfer_moe_cuda.so, or NotSupported saying where it was looked for."""
    global _cuda_lib, _cuda_why, CUDA_LIBRARY_PATH
    if _cuda_lib is not None:
        return _cuda_lib
    if _cuda_why is None:
        tried = []
        for path in _cuda_candidates():
            if not os.path.exists(path):
                tried.append(f"{path} (does not exist)")
                continue
            try:
                lib = ctypes.CDLL(path)
            except OSError as ex:
                tried.append(f"{path} ({ex})")
                continue
            try:
                lib.xfer_moe_cuda_version.restype = c_int
                version = lib.xfer_moe_cuda_version()
            except AttributeError:
                version = -1
            if version != CUDA_VERSION:  # an old build would lack entry points, or differ in them
                tried.append(f"{path} (version {version}; this binding needs {CUDA_VERSION}: rebuild it)")
                continue
            _cuda_lib = lib
            CUDA_LIBRARY_PATH = path
            return _cuda_lib
        _cuda_why = ("the MoE GPU path needs libxfer_moe_cuda.so, built with libxfer where nvcc "
                     "exists (or set XFER_MOE_CUDA_LIBRARY); looked at: " + "; ".join(tried))
    raise NotSupported(95, _cuda_why, "xfer.moe")


g = _Lazy(cuda_lib, _CUDA_PROTOS, "libxfer_moe_cuda.so")


def cuda_error() -> str:
    return (g.cuda_error() or b"").decode(errors="replace")


def release_fn_ptr() -> int:
    """Address of xfer_moe_cuda_release, for xfer_moe_set_release."""
    return ctypes.cast(cuda_lib().xfer_moe_cuda_release, c_void_p).value or 0


def ptr(t: Any) -> Optional[int]:
    return None if t is None else t.data_ptr()
