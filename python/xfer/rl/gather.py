"""Reassembling a parameter from its shards (FSDP's ``full_tensor()``).

The trainer calls ``gather(param, mesh, root, local, boxes, out)`` for each
gather task of its schedule: ``local`` is this rank's shard as a 2-D tensor,
``boxes`` every member's ``(rank, rows, cols)`` in the parameter's 2-D view,
``out`` the full 2-D tensor to fill (on ``root``, or on every member when
``root == -1``; None elsewhere). Every member calls it, in schedule order.

:class:`TorchGather` does it with torch.distributed (the training job's
process group; one subgroup per mesh). Any other collective library fits
the same signature.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple


class TorchGather:
    """Gathers over torch.distributed. Create it on every trainer rank after
    ``init_process_group`` (rank = trainer rank), with the schedule: it makes
    one subgroup per mesh, in the same order everywhere. ``stage_cpu``:
    collectives on host copies (gloo with CUDA tensors)."""

    def __init__(self, schedule, rank: int, stage_cpu: Optional[bool] = None):
        import torch.distributed as dist

        self.dist = dist
        self.rank = rank
        self.groups: Dict[int, Any] = {}
        for i, m in enumerate(schedule.meshes):
            self.groups[i] = dist.new_group(list(m)) if len(m) > 1 else None
        self.stage_cpu = dist.get_backend() == "gloo" if stage_cpu is None else stage_cpu

    def __call__(self, param: str, mesh: int, root: int, local, boxes: Sequence[Tuple[int, Tuple[int, int], Tuple[int, int]]],
                 out) -> None:
        import torch

        n = max((r[1] - r[0]) * (c[1] - c[0]) for _, r, c in boxes)
        dev = torch.device("cpu") if self.stage_cpu else local.device
        mine = torch.zeros(n, dtype=local.dtype, device=dev)
        if local.numel():
            mine[: local.numel()] = local.reshape(-1).to(dev)
        group = self.groups[mesh]
        if group is None:
            parts: Optional[List[Any]] = [mine]
        elif root == -1:
            parts = [torch.empty_like(mine) for _ in boxes]
            self.dist.all_gather(parts, mine, group=group)
        else:
            parts = [torch.empty_like(mine) for _ in boxes] if self.rank == root else None
            self.dist.gather(mine, parts, dst=root, group=group)
        if out is None:
            return
        ranks = [b[0] for b in boxes]
        order = sorted(range(len(boxes)), key=lambda i: ranks[i])  # torch returns parts in group-rank order
        for k, i in enumerate(order):
            _, (r0, r1), (c0, c1) = boxes[i]
            h, w = r1 - r0, c1 - c0
            if h and w:
                out[r0:r1, c0:c1].copy_(parts[k][: h * w].view(h, w))
