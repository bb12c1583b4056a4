"""A second process whose memory is torch CUDA tensors (test_pair_cuda.py).

Same pipe protocol as remote.py: JSON commands, raw bytes for addresses,
descriptors and memory read back. Each region is the middle of a larger
CUDA tensor filled with guard bytes, so that a write past its bounds shows.
"""
from __future__ import annotations

import json
import os
from typing import Any, Dict

from remote import _err, _reply, engine_kwargs


def serve(conn, provider: str, env: Dict[str, str], device: str) -> None:
    os.environ.update(env)  # XFER_GPU_IPC is read when the engine is created
    import torch

    import xfer

    torch.cuda.set_device(torch.device(device))
    try:
        eng = xfer.Engine(**engine_kwargs(provider))
    except xfer.Error as ex:
        _reply(conn, **_err(ex))
        return
    _reply(conn, ok=True, id=eng.id)
    conn.send_bytes(eng.address)
    peer = eng.add_peer(conn.recv_bytes())
    tensors: Dict[str, Any] = {}
    regions: Dict[str, Any] = {}
    remotes: Dict[str, Any] = {}
    expects: Dict[str, Any] = {}
    while True:
        cmd = json.loads(conn.recv_bytes())
        op = cmd.pop("op")
        try:
            if op == "quit":
                eng.close()
                _reply(conn, ok=True)
                return
            if op == "region":
                n, guard = cmd["nbytes"], cmd.get("guard", 0)
                full = torch.full((n + 2 * guard,), 0xEE, dtype=torch.uint8, device=device)
                full[guard : guard + n] = 0
                torch.cuda.synchronize()
                tensors[cmd["name"]] = (full, guard, n)
                regions[cmd["name"]] = r = eng.register(full[guard : guard + n])
                _reply(conn, ok=True, gpu=r.gpu)
                conn.send_bytes(r.descriptor)
            elif op == "fill":
                # A seeded pattern the parent can recompute, for writes from here.
                full, guard, n = tensors[cmd["name"]]
                g = torch.Generator(device="cpu").manual_seed(cmd["seed"])
                full[guard : guard + n] = torch.randint(0, 256, (n,), dtype=torch.uint8, generator=g).to(device)
                torch.cuda.synchronize()
                _reply(conn, ok=True)
            elif op == "read":
                full, guard, n = tensors[cmd["name"]]
                torch.cuda.synchronize()
                host = full.cpu()
                ok_guard = bool((host[:guard] == 0xEE).all() and (host[guard + n :] == 0xEE).all())
                _reply(conn, ok=True, guard_intact=ok_guard)
                conn.send_bytes(host[guard : guard + n].numpy().tobytes())
            elif op == "expect":
                expects[cmd["key"]] = eng.expect_imm(cmd["imm"], cmd["count"], timeout_ms=cmd.get("timeout_ms", 0))
                _reply(conn, ok=True)
            elif op == "wait":
                c = expects.pop(cmd["key"])
                try:
                    c.result(cmd.get("timeout", 60))
                    _reply(conn, ok=True, res=c.res)
                except xfer.Error as ex:
                    _reply(conn, ok=True, res=c.res, **_err(ex))
            elif op == "disarm":
                _reply(conn, ok=True, arrived=eng.imm_disarm(cmd["imm"]))
            elif op == "import":
                remotes[cmd["name"]] = eng.import_region(peer, conn.recv_bytes())
                _reply(conn, ok=True)
            elif op == "write":
                # From one of this process's CUDA regions into the parent's.
                eng.write(regions[cmd["src"]], remotes[cmd["dst"]], cmd["nbytes"], imm=cmd.get("imm")).result(60)
                _reply(conn, ok=True)
            else:
                _reply(conn, ok=False, error="UnknownCommand", message=op)
        except Exception as ex:  # noqa: BLE001 - reported to the parent test
            _reply(conn, ok=False, **_err(ex))
