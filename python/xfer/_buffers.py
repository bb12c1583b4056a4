"""Turning Python objects into (address, length, device) without copies.

Registration accepts, in this order of detection:

* a ``(ptr, nbytes)`` tuple of ints (raw memory; the caller keeps it alive);
* torch tensors (``data_ptr()``; CPU or CUDA);
* objects with ``__cuda_array_interface__`` (CuPy, Numba, ...): device memory;
* objects exporting the buffer protocol (numpy arrays, bytearray,
  memoryview, array.array, mmap): host memory, must be writable and
  C-contiguous;
* any other DLPack producer (``__dlpack__`` / ``__dlpack_device__``: JAX,
  TensorFlow, ...).

Index arrays for paged writes take a faster, narrower path (`index_array`):
numpy or torch int32/uint32, 1-D, contiguous, on the CPU — or any sequence
of ints, converted once.
"""
from __future__ import annotations

import array
import errno as _errno
import ctypes
from dataclasses import dataclass
from typing import Any, Callable, Dict, NamedTuple, Tuple

from ._errors import InvalidArgument

_c_char_from_buffer = ctypes.c_char.from_buffer
_addressof = ctypes.addressof

# DLPack device types (dlpack.h)
kDLCPU = 1
kDLCUDA = 2
kDLCUDAHost = 3
kDLROCM = 10
kDLROCMHost = 11
kDLCUDAManaged = 13
_DL_NAMES = {kDLCUDA: "cuda", kDLROCM: "rocm", kDLCUDAManaged: "cuda"}


@dataclass(frozen=True)
class Device:
    """Where memory lives: ``Device("cpu")`` or ``Device("cuda", 0)``."""

    type: str = "cpu"
    index: int = 0

    @property
    def is_host(self) -> bool:
        return self.type == "cpu"

    def __str__(self) -> str:
        return "cpu" if self.type == "cpu" else f"{self.type}:{self.index}"

    @classmethod
    def parse(cls, spec: "DeviceLike") -> "Device":
        """Accepts a Device, ``"cpu"``, ``"cuda"``, ``"cuda:1"``, a torch.device or a (type, index) pair."""
        if isinstance(spec, Device):
            return spec
        if spec is None:
            return CPU
        if isinstance(spec, tuple):
            return cls(str(spec[0]), int(spec[1]))
        t = getattr(spec, "type", None)  # torch.device
        if isinstance(t, str):
            idx = getattr(spec, "index", None)
            return cls(t, int(idx) if idx is not None else 0)
        if isinstance(spec, str):
            name, _, idx = spec.partition(":")
            return cls(name, int(idx) if idx else 0)
        raise InvalidArgument(_errno.EINVAL, f"not a device: {spec!r}")


DeviceLike = Any
CPU = Device("cpu", 0)


class Memory(NamedTuple):
    """A resolved span of memory. ``keep`` holds whatever keeps it alive."""

    ptr: int
    nbytes: int
    device: Device
    keep: Any


def _torch_memory(t: Any) -> Memory:
    if not t.is_contiguous():
        raise InvalidArgument(_errno.EINVAL, "tensor is not contiguous; call .contiguous() first")
    dev = t.device
    nbytes = t.numel() * t.element_size()
    if dev.type == "cpu":
        device = CPU
    else:
        device = Device(dev.type, dev.index if dev.index is not None else 0)
    return Memory(int(t.data_ptr()), int(nbytes), device, t)


def _cai_memory(obj: Any) -> Memory:
    cai = obj.__cuda_array_interface__
    ptr = int(cai["data"][0])
    if cai["data"][1]:
        raise InvalidArgument(_errno.EINVAL, "device array is read-only")
    if cai.get("strides") is not None:
        raise InvalidArgument(_errno.EINVAL, "device array is not C-contiguous")
    n = 1
    for s in cai["shape"]:
        n *= int(s)
    itemsize = int(cai["typestr"][2:])
    dev = 0
    try:
        dev = int(obj.__dlpack_device__()[1])
    except Exception:  # noqa: BLE001 - best effort
        dev = int(getattr(getattr(obj, "device", None), "id", 0) or 0)
    return Memory(ptr, n * itemsize, Device("cuda", dev), obj)


def _buffer_memory(obj: Any) -> Memory:
    mv = obj if isinstance(obj, memoryview) else memoryview(obj)
    if mv.readonly:
        raise InvalidArgument(
            22, f"{type(obj).__name__} is read-only; registered memory must be writable (peers write into it)"
        )
    if not mv.c_contiguous:
        raise InvalidArgument(_errno.EINVAL, f"{type(obj).__name__} is not C-contiguous")
    nbytes = mv.nbytes
    if nbytes == 0:
        raise InvalidArgument(_errno.EINVAL, "cannot register an empty buffer")
    # from_buffer takes a buffer export that lives as long as `anchor`: it
    # also stops a bytearray from being resized while registered.
    anchor = _c_char_from_buffer(mv)
    return Memory(_addressof(anchor), nbytes, CPU, (obj, anchor))


# ------------------------------------------------------------------- DLPack


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


_PyCapsule_GetPointer = ctypes.pythonapi.PyCapsule_GetPointer
_PyCapsule_GetPointer.restype = ctypes.c_void_p
_PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _dlpack_memory(obj: Any) -> Memory:
    dev_type, dev_id = obj.__dlpack_device__()
    dev_type = int(dev_type)
    if dev_type in (kDLCPU, kDLCUDAHost, kDLROCMHost):
        device = CPU
    else:
        device = Device(_DL_NAMES.get(dev_type, f"dlpack{dev_type}"), int(dev_id))
    capsule = obj.__dlpack__() if device.is_host else obj.__dlpack__(stream=None)
    # The capsule is never consumed (renamed to "used_dltensor"), so its
    # destructor releases the tensor when the capsule goes: keep it.
    t = _DLTensor.from_address(_PyCapsule_GetPointer(capsule, b"dltensor"))
    shape = [t.shape[i] for i in range(t.ndim)]
    itemsize = (t.dtype.bits * t.dtype.lanes + 7) // 8
    if t.strides:
        expect = itemsize
        for i in reversed(range(t.ndim)):
            if shape[i] != 1 and t.strides[i] * itemsize != expect:
                raise InvalidArgument(_errno.EINVAL, "DLPack tensor is not C-contiguous")
            expect *= shape[i]
    n = itemsize
    for s in shape:
        n *= s
    return Memory(int(t.data or 0) + int(t.byte_offset), int(n), device, (obj, capsule))


def _is_torch(obj: Any) -> bool:
    return type(obj).__module__.startswith("torch") and hasattr(obj, "data_ptr")


def resolve(obj: Any, device: DeviceLike = None) -> Memory:
    """Address, length and device of ``obj`` (see the module docstring)."""
    if isinstance(obj, tuple):
        if len(obj) != 2 or not all(isinstance(x, int) for x in obj):
            raise InvalidArgument(_errno.EINVAL, "raw memory is given as a (ptr, nbytes) tuple of ints")
        ptr, nbytes = obj
        if ptr <= 0 or nbytes <= 0:
            raise InvalidArgument(_errno.EINVAL, f"bad raw memory span (ptr={ptr:#x}, nbytes={nbytes})")
        return Memory(ptr, nbytes, Device.parse(device), None)
    if _is_torch(obj):
        m = _torch_memory(obj)
    elif hasattr(obj, "__cuda_array_interface__"):
        m = _cai_memory(obj)
    else:
        try:
            m = _buffer_memory(obj)
        except TypeError:
            if hasattr(obj, "__dlpack_device__"):
                m = _dlpack_memory(obj)
            else:
                raise InvalidArgument(
                    22,
                    f"cannot register a {type(obj).__name__}: give a numpy array, torch tensor, "
                    "bytearray/memoryview, DLPack or CUDA-array-interface object, or (ptr, nbytes)",
                ) from None
    if device is not None and Device.parse(device) != m.device:
        raise InvalidArgument(_errno.EINVAL, f"memory is on {m.device}, not {Device.parse(device)}")
    return m


# ------------------------------------------------------------- index arrays

_IndexFn = Callable[[Any], Tuple[int, int, Any]]
_index_converters: Dict[type, _IndexFn] = {}


def _np_index(a: Any) -> Tuple[int, int, Any]:
    if a.ndim != 1 or a.dtype.char not in "iI":
        raise InvalidArgument(_errno.EINVAL, f"page indices must be a 1-D contiguous int32/uint32 array (got {a.dtype}, ndim {a.ndim})")
    try:
        # The fast way to the data pointer; it also refuses non-contiguous arrays.
        # The array itself is the keepalive (numpy will not resize a referenced array).
        return _addressof(_c_char_from_buffer(a)), a.shape[0], a
    except (TypeError, ValueError, BufferError):
        pass
    if not a.flags.c_contiguous:
        raise InvalidArgument(_errno.EINVAL, "page index array is not contiguous")
    n = a.shape[0]
    if n == 0:
        return 0, 0, a
    return a.__array_interface__["data"][0], n, a  # read-only array: slower path


def _torch_index(t: Any) -> Tuple[int, int, Any]:
    import torch

    if t.dtype not in (torch.int32, getattr(torch, "uint32", torch.int32)) or t.dim() != 1:
        raise InvalidArgument(_errno.EINVAL, f"page indices must be a 1-D int32/uint32 tensor (got {t.dtype}, dim {t.dim()})")
    if t.device.type != "cpu":
        raise InvalidArgument(_errno.EINVAL, "page indices must be in host memory (the submit path reads them)")
    if not t.is_contiguous():
        raise InvalidArgument(_errno.EINVAL, "page index tensor is not contiguous")
    return t.data_ptr(), t.numel(), t


def _generic_index(a: Any) -> Tuple[int, int, Any]:
    if _is_torch(a):
        _index_converters[type(a)] = _torch_index
        return _torch_index(a)
    if type(a).__name__ == "ndarray" and hasattr(a, "__array_interface__"):
        _index_converters[type(a)] = _np_index
        return _np_index(a)
    if isinstance(a, memoryview) or isinstance(a, array.array):
        mv = memoryview(a)
        if mv.format in ("i", "I") and mv.itemsize == 4 and mv.ndim == 1 and mv.c_contiguous:
            if mv.nbytes == 0:
                return 0, 0, a
            if not mv.readonly:
                return _addressof(_c_char_from_buffer(mv)), len(mv), (a, mv)
        a = list(mv)
    try:
        arr = array.array("I", a)  # any other sequence of ints: one conversion
    except (TypeError, OverflowError) as ex:
        raise InvalidArgument(_errno.EINVAL, f"page indices must be uint32 values: {ex}") from None
    if len(arr) == 0:
        return 0, 0, arr
    return _addressof(_c_char_from_buffer(arr)), len(arr), arr


def index_array(a: Any) -> Tuple[int, int, Any]:
    """(address, count, keepalive) of an index array; no copy for numpy/torch."""
    fn = _index_converters.get(type(a))
    if fn is None:
        return _generic_index(a)
    return fn(a)


def buffer_ptr(data: Any) -> Tuple[int, int, Any]:
    """(address, nbytes, keepalive) of a host buffer to send; copies only read-only non-bytes buffers."""
    if type(data) is bytes:
        n = len(data)
        return (ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p).value or 0) if n else 0, n, data
    mv = memoryview(data)
    n = mv.nbytes
    if n == 0:
        return 0, 0, data
    if not mv.c_contiguous:
        raise InvalidArgument(_errno.EINVAL, "message buffer is not C-contiguous")
    if mv.readonly:
        b = mv.tobytes()
        return ctypes.cast(ctypes.c_char_p(b), ctypes.c_void_p).value or 0, n, b
    anchor = _c_char_from_buffer(mv)
    return _addressof(anchor), n, (data, anchor)
