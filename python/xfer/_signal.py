"""Completion signal words: ``struct xfer_completion.signal`` / ``signal_value``.

The engine's worker stores ``signal_value`` into the word (a release store)
just before it delivers the completion, so that something that cannot wait
on the completion queue — a GPU kernel spinning on mapped memory, another
thread — can start at once. Operations take ``signal=(target, value)``;
the target is a :class:`Signal` or anything its constructor accepts.
"""
from __future__ import annotations

import errno as _errno
import time
from ctypes import addressof, c_uint64
from typing import Any, Optional, Tuple

from ._buffers import resolve
from ._errors import InvalidArgument, TimeoutError
from ._mapped import cuda_tensor, import_torch

_U64_MAX = (1 << 64) - 1
_LINE = 64  # a word of its own keeps pollers off other data's cache line


class Signal:
    """One 64-bit word that an operation's completion stores a value into.

    ``Signal()`` owns a zeroed word on a cache line of its own, in host
    memory. ``Signal(memory, index=0)`` is word ``index`` of existing host
    memory — a numpy uint64 array, a pinned torch CPU tensor, a bytearray,
    any writable buffer (kept alive by the Signal) — or of a raw int address
    (the caller keeps that alive). :meth:`pinned` makes one that a GPU can
    read as well (torch pinned memory; see :meth:`tensor`).

    Pass it to any operation as ``signal=(sig, value)``: once the operation
    completes — with success *or* an error (deadline, cancellation, peer
    death): the word says "finished", the :class:`Completion` says how — the
    word holds ``value``. The completion keeps the Signal alive until then.
    Exception: an ``expect_imm`` refused at once (``Busy``/``NoSpace``)
    completes without the store.
    """

    __slots__ = ("address", "mapped", "_word", "_keep", "__weakref__")

    def __init__(self, memory: Any = None, index: int = 0):
        if not isinstance(index, int) or index < 0:
            raise InvalidArgument(_errno.EINVAL, f"index must be a non-negative int, not {index!r}", "Signal")
        self.mapped = False  # a GPU can read it (pinned() or a pinned torch tensor)
        keep: Any
        if memory is None:
            if index:
                raise InvalidArgument(_errno.EINVAL, "index is for existing memory", "Signal")
            words = (c_uint64 * ((2 * _LINE) // 8))()  # zeroed; one aligned line lies inside
            base = addressof(words)
            addr = base + (-base) % _LINE
            keep = words
        elif isinstance(memory, int) and not isinstance(memory, bool):
            if memory <= 0:
                raise InvalidArgument(_errno.EINVAL, f"bad address {memory:#x}", "Signal")
            addr, keep = memory + 8 * index, None
        elif _is_watcher(memory):
            raise InvalidArgument(
                _errno.EINVAL,
                "a Watcher's word cannot be a completion signal: close() frees it whatever is in flight; "
                "use a Signal (or callback=) instead",
                "Signal",
            )
        else:
            try:
                mem = resolve(memory)
            except InvalidArgument as ex:
                raise InvalidArgument(_errno.EINVAL, f"a signal word needs writable host memory: {ex.strerror}", "Signal") from None
            if not mem.device.is_host:
                raise InvalidArgument(
                    _errno.EINVAL,
                    f"a signal word must be host memory, not {mem.device}: the engine's worker stores it from the "
                    "CPU (use Signal.pinned() for a word a GPU kernel can read)",
                    "Signal",
                )
            if 8 * (index + 1) > mem.nbytes:
                raise InvalidArgument(
                    _errno.EINVAL, f"word {index} lies past the end of {mem.nbytes} bytes", "Signal"
                )
            addr, keep = mem.ptr + 8 * index, mem.keep
            self.mapped = _is_pinned_torch(memory)
        if addr % 8:
            raise InvalidArgument(_errno.EINVAL, f"a signal word must be 8-byte aligned ({addr:#x} is not)", "Signal")
        self.address: int = addr
        self._word = c_uint64.from_address(addr)
        self._keep = keep

    @classmethod
    def pinned(cls) -> "Signal":
        """A Signal in pinned host memory (torch's, so torch with CUDA is
        needed) that GPU kernels can read too: with unified addressing (every
        64-bit CUDA platform) pinned memory is mapped at the same address on
        every device, so :attr:`device_ptr` equals :attr:`address`.
        Raises :class:`xfer.NoGPU` without CUDA, :class:`xfer.NotSupported`
        without torch."""
        torch = import_torch("Signal.pinned")
        t = torch.zeros((2 * _LINE) // 8, dtype=torch.int64, pin_memory=True)
        base = int(t.data_ptr())
        s = cls(t, ((-base) % _LINE) // 8)
        s.mapped = True
        return s

    @property
    def device_ptr(self) -> int:
        """The word's address for a GPU kernel; 0 unless it is pinned memory."""
        return self.address if self.mapped else 0

    @property
    def value(self) -> int:
        """The word now."""
        return self._word.value

    def set(self, value: int = 0) -> None:
        """Stores ``value`` (e.g. resets the word before reusing it)."""
        self._word.value = _u64(value, "Signal.set")

    reset = set

    def wait(self, value: int, timeout: Optional[float] = None, *, exact: bool = False) -> int:
        """Waits until the word reaches ``value`` (``>=``, unsigned; with
        ``exact`` only ``==``) and returns what it holds. Raises
        :class:`xfer.TimeoutError` after ``timeout`` seconds (None: forever).

        It polls: briefly in a tight loop, then sleeping 20 µs doubling to
        1 ms. The word only says the operation finished; its
        :class:`Completion` says whether it succeeded."""
        want = _u64(value, "Signal.wait")
        word = self._word
        v = word.value
        if v == want or (v > want and not exact):
            return v
        now = time.monotonic()
        deadline = None if timeout is None else now + max(0.0, timeout)
        spin_until = now + 50e-6
        nap = 20e-6
        while True:
            v = word.value
            if v == want or (v > want and not exact):
                return v
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                raise TimeoutError(
                    _errno.ETIMEDOUT, f"signal word is {v}, not {'' if exact else '>= '}{want}, after {timeout} s", "Signal.wait"
                )
            if now < spin_until:
                continue
            time.sleep(nap if deadline is None else min(nap, deadline - now))
            nap = min(nap * 2, 1e-3)

    def tensor(self, device: Any = None) -> Any:
        """The word as a 1-element int64 CUDA tensor (torch), for a kernel —
        a Triton or custom CUDA kernel that spins on it — to read, on
        ``device`` (default: torch's current CUDA device). Only for a pinned
        Signal (:meth:`pinned`, or one made over a pinned torch tensor); the
        tensor keeps the Signal's memory alive."""
        if not self.mapped:
            raise InvalidArgument(
                _errno.EINVAL,
                "this Signal is pageable host memory, which no GPU can read: use Signal.pinned()",
                "Signal.tensor",
            )
        t, _ = cuda_tensor(self.address, 1, self, "Signal.tensor", device)
        return t

    def __int__(self) -> int:
        return self._word.value

    def __repr__(self) -> str:
        kind = "pinned " if self.mapped else ""
        return f"<xfer.Signal {kind}word at {self.address:#x} = {self._word.value}>"


def _u64(value: Any, op: str) -> int:
    if not isinstance(value, int) or not 0 <= value <= _U64_MAX:
        raise InvalidArgument(_errno.EINVAL, f"a signal value is an unsigned 64-bit int, not {value!r}", op)
    return int(value)


def _is_watcher(obj: Any) -> bool:
    from ._watcher import Watcher

    return isinstance(obj, Watcher)


def _is_pinned_torch(obj: Any) -> bool:
    if not type(obj).__module__.startswith("torch"):
        return False
    try:
        return bool(obj.is_pinned())
    except Exception:  # noqa: BLE001 - not a tensor after all, or no CUDA
        return False


SignalSpec = Tuple[Any, int]


def signal_args(spec: Any, op: str) -> Tuple[int, int, Signal]:
    """(address, value, keepalive) of an operation's ``signal=(target, value)``."""
    try:
        target, value = spec
    except (TypeError, ValueError):
        raise InvalidArgument(
            _errno.EINVAL, f"signal= takes a (Signal, value) pair, not {spec!r}", op
        ) from None
    if type(target) is not Signal:
        if target is None:  # Signal(None) would be a fresh word nobody reads
            raise InvalidArgument(_errno.EINVAL, "signal=(None, value): give a Signal, host memory or an address", op)
        target = Signal(target)
    return target.address, _u64(value, op), target
