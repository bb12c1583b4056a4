"""The trainer's staging memory: one registered buffer, the watermark.

Gathered full tensors and prepared (fused, quantized) bands live here until
their WRITEs complete; registering it once keeps memory registration off
the per-step path, and its size bounds the temporaries: a task that does not
fit waits for earlier WRITEs to complete. Allocation is a ring (tasks
allocate in order); frees may come in any order, the ring's head advances
over them.
"""
from __future__ import annotations

from collections import deque
from typing import Deque, List, Optional

from .layout import ALIGN, align


class Pool:
    def __init__(self, nbytes: int):
        self.capacity = align(nbytes, ALIGN)
        self._live: Deque[List[int]] = deque()  # [start, end, freed]
        self._by_start = {}
        self.high_water = 0
        self.in_use = 0

    def alloc(self, nbytes: int) -> Optional[int]:
        """Offset of ``nbytes`` free bytes (aligned), or None if they do not fit now."""
        n = align(max(nbytes, 1), ALIGN)
        if n > self.capacity:
            raise MemoryError(f"a task needs {n} bytes of staging; the pool has {self.capacity}")
        live = self._live
        if not live:
            start = 0
        else:
            head, tail = live[0][0], live[-1][1]
            if live[-1][0] >= head:  # not wrapped: free space is [tail, cap) and [0, head)
                if self.capacity - tail >= n:
                    start = tail
                elif head >= n:
                    start = 0
                else:
                    return None
            elif head - tail >= n:  # wrapped: free space is [tail, head)
                start = tail
            else:
                return None
        e = [start, start + n, 0]
        live.append(e)
        self._by_start[start] = e
        self.in_use += n
        self.high_water = max(self.high_water, self.in_use)
        return start

    def free(self, start: int) -> None:
        e = self._by_start.pop(start)
        e[2] = 1
        self.in_use -= e[1] - e[0]
        live = self._live
        while live and live[0][2]:
            live.popleft()

    @property
    def empty(self) -> bool:
        return not self._live
