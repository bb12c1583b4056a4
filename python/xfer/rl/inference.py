"""The inference side: register the parameter memory once, then per step
only wait for an immediate count and switch.

``Inference.wait(step)`` arms one immediate counter per trainer (the count
the schedule says that trainer delivers here), waits, and switches to the
new weights atomically: with two buffers the step's buffer becomes the
active one (``on_switch`` is called) and the other is granted to the
trainers for the next step; with one buffer the caller pauses serving with
``begin(step)`` (``on_pause``, then the grant) and ``wait`` resumes it
(``on_resume``). Nothing happens per parameter.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Optional, Sequence

import xfer

from . import fp8, wire
from .layout import Target


class Inference:
    """One inference rank: ``targets`` (its layout) in ``region_bytes`` of
    memory on ``device``, ``buffers`` copies (2: double buffering)."""

    def __init__(self, rank: int, targets: Sequence[Target], region_bytes: int, *, device: Any = "cpu",
                 buffers: int = 2, on_switch: Optional[Callable[[int, int], None]] = None,
                 on_pause: Optional[Callable[[int], None]] = None, on_resume: Optional[Callable[[int], None]] = None,
                 heartbeat_ms: int = 200, heartbeat_misses: int = 10, **engine_kw: Any):
        import torch

        if buffers not in (1, 2):
            raise ValueError("buffers must be 1 (pause/resume) or 2 (double buffer)")
        self.torch = torch
        self.rank = rank
        self.targets = {t.name: t for t in targets}
        self.buffers = buffers
        self.on_switch, self.on_pause, self.on_resume = on_switch, on_pause, on_resume
        self.eng = xfer.Engine(heartbeat_ms=heartbeat_ms, heartbeat_misses=heartbeat_misses, **engine_kw)
        self.memory = [torch.zeros(region_bytes, dtype=torch.uint8, device=device) for _ in range(buffers)]
        self.regions = [self.eng.register(m) for m in self.memory]
        self.active: Optional[int] = None  # buffer index serving now
        self.step: Optional[int] = None  # the step whose weights are active
        self.expected: List[int] = []
        self.trainers: List[Any] = []

    @property
    def address(self) -> bytes:
        return self.eng.address

    @property
    def descriptors(self) -> List[bytes]:
        return [r.descriptor for r in self.regions]

    def endpoint(self):
        return (self.address, self.descriptors)

    def connect(self, trainers: Sequence[bytes], expected: Sequence[int], first_step: int) -> None:
        """The trainers' addresses, this rank's row of ``schedule.expected``, and
        the first step it will receive (granted at once with two buffers)."""
        self.trainers = [self.eng.add_peer(a) for a in trainers]
        self.expected = list(expected)
        if self.buffers == 2:
            self._grant(first_step)

    def _grant(self, step: int) -> None:
        i = wire.imm(wire.GRANT, step, self.rank)
        for p in self.trainers:
            try:
                self.eng.write_imm(p, i)
            except xfer.Error:
                pass  # a dead trainer: its update fails, the others still get the grant

    def begin(self, step: int) -> None:
        """Single buffer: pause serving (``on_pause``) and let the trainers write."""
        if self.buffers != 1:
            raise RuntimeError("begin() is for a single buffer; two buffers are granted by wait()")
        if self.on_pause is not None:
            self.on_pause(step)
        self._grant(step)

    def wait(self, step: int, timeout: float = 60.0) -> None:
        """Returns once every trainer's writes of ``step`` have landed, then
        switches; raises :class:`UpdateError` naming the trainers that did not
        deliver (with how many of their writes arrived)."""
        deadline = time.monotonic() + timeout
        arms = {}
        for t, n in enumerate(self.expected):
            if n:
                arms[t] = self.eng.expect_imm(wire.imm(wire.DATA, step, t), n, timeout_ms=max(1, int(timeout * 1000)))
        failed: Dict[str, str] = {}
        for t, c in arms.items():
            try:
                c.result(timeout=max(0.001, deadline - time.monotonic()) + 1)
            except Exception as e:
                arrived = 0
                try:
                    arrived = self.eng.imm_disarm(wire.imm(wire.DATA, step, t))
                except xfer.Error:
                    pass
                failed[f"trainer {t}"] = f"{arrived} of {self.expected[t]} writes arrived ({type(e).__name__})"
        if failed:
            raise wire.UpdateError(step, failed, f"inference {self.rank}")
        buf = step % self.buffers
        self.active, self.step = buf, step
        if self.buffers == 2:
            if self.on_switch is not None:
                self.on_switch(step, buf)
            self._grant(step + 1)
        elif self.on_resume is not None:
            self.on_resume(step)

    # ------------------------------------------------------------ the weights
    def tensor(self, name: str, buffer: Optional[int] = None):
        """Target ``name`` as a 2-D torch tensor of its dtype (a view of the
        active buffer, or of ``buffer``)."""
        t = self.targets[name]
        mem = self.memory[self.active if buffer is None else buffer]
        return mem[t.offset:t.offset + t.nbytes].view(fp8.torch_dtype(t.dtype)).view(t.shape)

    def scales(self, name: str, buffer: Optional[int] = None):
        """An FP8 target's float32 block scales."""
        t = self.targets[name]
        mem = self.memory[self.active if buffer is None else buffer]
        return mem[t.scale_offset:t.scale_offset + t.scale_nbytes].view(self.torch.float32).view(t.scale_shape)

    def close(self) -> None:
        self.eng.close()

    def __enter__(self) -> "Inference":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
