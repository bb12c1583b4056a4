"""RL weight updates: trainer ranks write new weights straight into inference memory.

The controller collects both sides' descriptions and computes a static
schedule once::

    from xfer import rl

    shards = rl.fsdp_shards("layers.0.q", (4096, 4096), "bfloat16", mesh=(0, 1, 2, 3))   # per trainer rank
    targets = [rl.Target(...), ...]                                    # per inference rank (its layout)
    schedule = rl.build_schedule(shards, targets)                      # balanced, validated
    blob = schedule.to_bytes()                                         # to every rank

Each trainer: ``rl.Trainer(schedule, rank, params, boxes, gather=...)``,
``connect(...)``, then ``update(step)`` after each training step. Each
inference rank: ``rl.Inference(rank, targets, nbytes)``, ``connect(...)``,
then ``wait(step)``. See docs/rl.md.
"""
from .layout import BLOCK, FP8, LayoutError, Piece, Placer, Shard, Sharded, Target, fsdp_shards, view2d
from .plan import build as build_schedule
from .schedule import Schedule, ScheduleError
from .wire import UpdateError

__all__ = [
    "BLOCK", "FP8", "LayoutError", "Piece", "Placer", "Shard", "Sharded", "Target", "fsdp_shards", "view2d",
    "build_schedule", "Schedule", "ScheduleError", "UpdateError", "Trainer", "Inference", "local_boxes",
]


def __getattr__(name):  # the runtime classes need torch; the planner does not
    if name in ("Trainer", "local_boxes"):
        from . import trainer

        return getattr(trainer, name)
    if name == "Inference":
        from .inference import Inference

        return Inference
    raise AttributeError(name)
