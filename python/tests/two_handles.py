"""Run as a script by test_pair.py: one remote engine added twice as a peer,
the second handle removed, then the first used again. Prints one JSON line
per step, so that the test can tell how far it got if the process dies."""
from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def step(name: str, **kw) -> None:
    print(json.dumps(dict(step=name, **kw)), flush=True)


def main(provider: str) -> None:
    import numpy as np

    import xfer
    from remote import Remote

    eng = xfer.Engine(provider=provider, timeout_ms=10000, heartbeat_ms=0, **({"nics": "lo"} if provider == "tcp" else {}))
    remote = Remote(provider)
    try:
        first = remote.connect(eng)
        dst1 = eng.import_region(first, remote.region("first", 4096))
        desc = remote.region("stale", 4096)
        second = eng.add_peer(remote.address)  # the same engine, a second handle
        step("added", distinct=second.index != first.index, same_id=second.id == first.id == remote.id)
        dst = second.import_region(desc)
        src = eng.register(np.arange(4096, dtype=np.uint8))
        eng.write(src, dst, 16).result(10)
        second.remove()
        step("removed", state=second.state)
        errors = {}
        for name, call in (
            ("write_stale", lambda: eng.write(src, dst, 16)),
            ("write_imm_removed", lambda: eng.write_imm(second, 1)),
            ("import_removed", lambda: eng.import_region(second, desc)),
        ):
            try:
                call()
                errors[name] = None
            except xfer.Error as ex:
                errors[name] = type(ex).__name__
        step("stale", **errors)
        # The first handle is untouched. The receiver learns of the data from
        # the immediate (on shm a completed write may not have landed yet).
        remote.check("expect", key="first", imm=7, count=1, timeout_ms=10000)
        eng.write(src, dst1, 4096, imm=7).result(10)
        landed = remote.check("wait", key="first").get("res") == 0
        ok = landed and remote.read("first") == np.arange(4096, dtype=np.uint8).tobytes()
        step("first_handle", ok=ok, state=first.state)
        src.close()
    finally:
        remote.close()
        eng.close()
    step("done")


if __name__ == "__main__":
    main(sys.argv[1])
