"""CUDA tensor views of host words that CUDA has mapped into the device.

The watcher's word (pinned and device-mapped by libxfer) and a pinned
:class:`xfer.Signal` are host memory that kernels can load and store. torch
wraps such an address as a CUDA tensor through ``__cuda_array_interface__``:
it asks the driver which device the pointer belongs to, and the tensor holds
the object below (hence the memory's owner) for as long as it lives. Only
torch is needed (no numba or cupy); torch parses the interface with numpy.
"""
from __future__ import annotations

import errno as _errno
from typing import Any, Tuple

from . import _lib
from ._errors import InvalidArgument, NoGPU, NotSupported


class MappedWords:
    """``count`` int64 words at device address ``ptr``, owned by ``owner``."""

    def __init__(self, ptr: int, count: int, owner: Any):
        # int64, not uint64: torch's uint64 supports few operations, and
        # add_/fill_/copy_ on the same bits are what kernels do with the word.
        self.__cuda_array_interface__ = {
            "shape": (count,),
            "typestr": "<i8",
            "data": (ptr, False),
            "strides": None,
            "version": 3,
            # None: torch needs no stream synchronisation to use the memory
            # (it is never written by a stream torch would have to wait for).
            "stream": None,
        }
        self.owner = owner


def import_torch(what: str) -> Any:
    """torch with a usable CUDA device, or the error that says why not."""
    try:
        import torch
    except Exception as ex:  # noqa: BLE001 - ImportError, or a broken install's OSError
        raise NotSupported(_errno.EOPNOTSUPP, f"{what} needs torch, which is not importable here: {ex}", what) from None
    if not torch.cuda.is_available():
        raise NoGPU(_lib.XFER_ENOGPU, f"{what} needs CUDA, and torch.cuda.is_available() is False", what)
    return torch


def cuda_tensor(ptr: int, count: int, owner: Any, what: str, device: Any = None) -> Tuple[Any, MappedWords]:
    """(an int64 CUDA tensor over ``count`` words at ``ptr``, the object it holds).

    ``device`` (default: torch's current CUDA device) is the device the
    tensor claims, hence whose streams run the ops on it. Host memory that
    CUDA maps is reachable from every GPU at one address (unified
    addressing), so any device is right; naming it with its index also stops
    torch from inferring one and then *copying* the tensor to the device
    wanted — which an old torch would still do: the view is checked.
    """
    torch = import_torch(what)
    dev = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
    if dev.type != "cuda":
        raise InvalidArgument(_errno.EINVAL, f"{what}: device must be a CUDA device, not {dev}", what)
    if dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    holder = MappedWords(ptr, count, owner)
    t = torch.as_tensor(holder, device=dev)
    if not t.is_cuda or t.data_ptr() != ptr:
        raise NotSupported(
            _errno.EOPNOTSUPP,
            f"{what}: this torch ({torch.__version__}) made a copy on {t.device} instead of a view of {ptr:#x} on {dev}"
            + ("" if dev.index == 0 else "; try device='cuda:0'"),
            what,
        )
    return t, holder
