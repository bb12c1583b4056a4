"""Machine topology (``xfer_topology``): GPUs and NICs, their PCI addresses
and NUMA nodes, and which NICs belong with which GPU. Discovery needs a
libxfer built with hwloc; without it these raise :class:`xfer.NotSupported`.
"""
from __future__ import annotations

import ctypes
import errno as _errno
from typing import List, NamedTuple

from . import _lib
from ._errors import InvalidArgument, NoGPU, check

__all__ = ["TopologyDevice", "topology", "nics_for_gpu", "CPU_AUTO"]

#: ``Engine(worker_cpu=CPU_AUTO)`` (or ``"auto"``): pin the engine's worker to
#: the cores of its first NIC's NUMA node (left unpinned when unknown).
CPU_AUTO: int = _lib.XFER_CPU_AUTO

_KINDS = {_lib.XFER_DEV_NIC: "nic", _lib.XFER_DEV_GPU: "gpu"}


class TopologyDevice(NamedTuple):
    """One ``struct xfer_topo_dev``."""

    kind: str  #: "gpu" or "nic"
    name: str  #: "gpuN", or the interface name ("eth0", "mlx5_0")
    pci: str  #: PCI address ("0000:17:00.0"), "" when not on PCI
    numa: int  #: NUMA node, -1 when unknown


def topology() -> List[TopologyDevice]:
    """The machine's GPUs, then its NICs (``xfer_topology``)."""
    cap = 64
    while True:
        buf = (_lib.xfer_topo_dev * cap)()
        n = check(_lib.xfer_topology(buf, cap), "xfer_topology")
        if n <= cap:
            break
        cap = n  # more devices than room: ask again with enough
    return [
        TopologyDevice(
            _KINDS.get(d.kind, str(d.kind)),
            d.name.decode("utf-8", "replace"),
            d.pci.decode("utf-8", "replace"),
            int(d.numa),
        )
        for d in buf[:n]
    ]


def nics_for_gpu(gpu: int) -> List[str]:
    """The NICs that belong with GPU ``gpu`` (index among the GPUs of
    :func:`topology`): those on its NUMA node, else all of them
    (``xfer_topology_nics_for_gpu``). Pass the list as ``Engine(nics=...)``.
    Raises :class:`xfer.NoGPU` when there is no such GPU."""
    if not isinstance(gpu, int) or isinstance(gpu, bool) or gpu < 0:
        raise InvalidArgument(_errno.EINVAL, f"gpu must be a non-negative int, not {gpu!r}", "xfer_topology_nics_for_gpu")
    buf = ctypes.create_string_buffer(64 * 16 + 1)  # XFER_NIC_MAX names of up to 63 bytes
    while True:
        rc = _lib.xfer_topology_nics_for_gpu(gpu, buf, len(buf))
        if rc == -_errno.ENOSPC and len(buf) < 1 << 16:
            buf = ctypes.create_string_buffer(len(buf) * 4)
            continue
        if rc == -_errno.ENODEV:
            raise NoGPU(_lib.XFER_ENOGPU, f"no GPU {gpu} in the topology", "xfer_topology_nics_for_gpu")
        check(rc, "xfer_topology_nics_for_gpu")
        text = buf.value.decode("utf-8", "replace")
        return [n for n in text.split(",") if n]
