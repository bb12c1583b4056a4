"""Immediates and control messages of an update.

An immediate is ``kind << 28 | (step mod 4096) << 16 | who``:

* ``DATA``  (who = trainer rank): on every WRITE a trainer makes into an
  inference rank for that step; the inference rank counts them per trainer.
* ``GRANT`` (who = inference rank): an inference rank to every trainer,
  "the buffer of this step is free" (double buffering) or "paused"
  (single buffer); a trainer writes into a rank only after its grant.
* ``GROUP`` (who = mesh-group index): the trainers' barrier between mesh groups.

Steps wrap at 4096: only steps in flight at the same time must differ.
Status messages between trainers (the final barrier, which also carries
failures) are small JSON SENDs.
"""
from __future__ import annotations

import json
from typing import Any, Dict

DATA, GRANT, GROUP = 1, 2, 3
STEP_MOD = 1 << 12
MAX_WHO = 1 << 16


def imm(kind: int, step: int, who: int) -> int:
    if not 0 <= who < MAX_WHO:
        raise ValueError(f"rank {who} does not fit an immediate")
    return (kind << 28) | ((step % STEP_MOD) << 16) | who


class UpdateError(RuntimeError):
    """An update that did not complete: ``failed`` maps each rank that failed
    to why (``"inference 1"``, ``"trainer 2"``)."""

    def __init__(self, step: int, failed: Dict[str, str], where: str):
        self.step = step
        self.failed = dict(failed)
        names = ", ".join(f"{k} ({v})" for k, v in sorted(self.failed.items()))
        super().__init__(f"step {step} failed at {where}: {names}")

    @property
    def inference_ranks(self):
        return sorted(int(k.split()[1]) for k in self.failed if k.startswith("inference "))


def status(step: int, rank: int, epoch: int, failed: Dict[str, str], limit: int = 8000) -> bytes:
    """At most ``limit`` bytes (the engine's msg_max is 8 KiB by default):
    reasons are shortened, then dropped (the rank names kept) if need be."""
    for width in (200, 40, 0):
        f = {k: v[:width] for k, v in failed.items()}
        b = json.dumps({"k": "status", "step": step, "rank": rank, "epoch": epoch, "failed": f}).encode()
        if len(b) <= limit:
            return b
    names = sorted(failed)
    while names:
        names = names[: len(names) // 2]
        f = {k: "" for k in names}
        f["more"] = f"{len(failed) - len(names)} more failures"
        b = json.dumps({"k": "status", "step": step, "rank": rank, "epoch": epoch, "failed": f}).encode()
        if len(b) <= limit:
            return b
    return json.dumps({"k": "status", "step": step, "rank": rank, "epoch": epoch,
                       "failed": {"more": f"{len(failed)} failures"}}).encode()


def parse_status(data: bytes) -> Dict[str, Any]:
    """A status message from another trainer (untrusted: checked)."""
    v = json.loads(bytes(data)[:65536])
    if not (isinstance(v, dict) and v.get("k") == "status" and isinstance(v.get("step"), int)
            and isinstance(v.get("rank"), int) and isinstance(v.get("failed"), dict)):
        raise ValueError("not a status message")
    v["failed"] = {str(k)[:64]: str(x)[:200] for k, x in list(v["failed"].items())[:1024]}
    return v
