"""A second process with its own xfer engine, driven over a pipe.

The parent and the child exchange engine addresses and region descriptors
as raw bytes (``send_bytes``/``recv_bytes``), the way separate hosts would
over their own control plane; commands and replies are small JSON objects.
The child verifies nothing itself: it hands its memory back so that the
parent test can compare it with what it wrote.
"""
from __future__ import annotations

import errno
import json
import multiprocessing
import os
import queue
import re
import time
from typing import Any, Dict, Optional

_CTX = multiprocessing.get_context("spawn")


def engine_kwargs(provider: str) -> Dict[str, Any]:
    kw: Dict[str, Any] = {"provider": provider, "timeout_ms": 30000}
    if provider in ("tcp", "tcp;ofi_rxm"):
        kw["nics"] = os.environ.get("XFER_NICS", "lo")
    return kw


def _reply(conn, **kw: Any) -> None:
    conn.send_bytes(json.dumps(kw).encode())


def _err(ex: BaseException) -> Dict[str, Any]:
    return {"error": type(ex).__name__, "errno": getattr(ex, "errno", None), "message": str(ex)}


def serve(conn, provider: str, extra: Dict[str, Any]) -> None:
    """Child process main: one engine, commands until "quit"."""
    import numpy as np

    import xfer

    inbox: "queue.Queue[xfer.Message]" = queue.Queue()
    try:
        eng = xfer.Engine(on_recv=inbox.put, **{**engine_kwargs(provider), **extra})
    except xfer.Error as ex:
        _reply(conn, **_err(ex))
        return
    _reply(conn, ok=True, id=eng.id, provider=eng.provider, msg_max=eng.msg_max, nics=len(eng.nics))
    conn.send_bytes(eng.address)
    peer = eng.add_peer(conn.recv_bytes())
    peers: Dict[str, Any] = {"parent": peer}
    groups: Dict[str, Any] = {}
    arrays: Dict[str, Any] = {}
    regions: Dict[str, Any] = {}
    remotes: Dict[str, Any] = {}
    expects: Dict[str, Any] = {}
    while True:
        cmd = json.loads(conn.recv_bytes())
        op = cmd.pop("op")
        try:
            if op == "quit":
                eng.close()
                _reply(conn, ok=True, regions=eng.region_count)
                return
            if op == "info":
                _reply(conn, ok=True, id=eng.id, peer_id=peer.id)
            elif op == "region":
                # A zeroed region with guard bytes around it that must stay untouched.
                n, guard = cmd["nbytes"], cmd.get("guard", 0)
                full = np.full(n + 2 * guard, 0xEE, dtype=np.uint8)
                full[guard : guard + n] = 0
                arrays[cmd["name"]] = (full, guard, n)
                regions[cmd["name"]] = eng.register(full[guard : guard + n])
                _reply(conn, ok=True)
                conn.send_bytes(regions[cmd["name"]].descriptor)
            elif op == "read":
                full, guard, n = arrays[cmd["name"]]
                ok_guard = bool((full[:guard] == 0xEE).all() and (full[guard + n :] == 0xEE).all())
                _reply(conn, ok=True, guard_intact=ok_guard)
                conn.send_bytes(full[guard : guard + n].tobytes())
            elif op == "zero":
                full, guard, n = arrays[cmd["name"]]
                full[guard : guard + n] = 0
                _reply(conn, ok=True)
            elif op == "expect":
                expects[cmd["key"]] = eng.expect_imm(cmd["imm"], cmd["count"], timeout_ms=cmd.get("timeout_ms", 0))
                _reply(conn, ok=True)
            elif op == "wait":
                c = expects.pop(cmd["key"])
                try:
                    c.result(cmd.get("timeout", 30))
                    _reply(conn, ok=True, res=c.res, kind=c.kind)
                except xfer.Error as ex:
                    _reply(conn, ok=True, res=c.res, kind=c.kind, **_err(ex))
            elif op == "poll":
                c = expects[cmd["key"]]
                _reply(conn, ok=True, done=c.done(), res=c.res)
            elif op == "add_peer":
                # Another engine's address ("self": this engine's own).
                blob = conn.recv_bytes()
                peers[cmd["name"]] = eng.add_peer(eng.address if cmd["name"] == "self" else blob)
                _reply(conn, ok=True, index=peers[cmd["name"]].index)
            elif op == "group":
                groups[cmd["name"]] = eng.group([peers[m] for m in cmd["members"]])
                _reply(conn, ok=True, size=len(groups[cmd["name"]]))
            elif op == "barrier":
                expects[cmd["key"]] = eng.barrier(groups[cmd["group"]], cmd["imm"])
                _reply(conn, ok=True)
            elif op == "revoke":
                regions[cmd["name"]].revoke()
                _reply(conn, ok=True)
            elif op == "nic_info":
                _reply(conn, ok=True, **eng.nic_info(cmd.get("nic", 0))._asdict())
            elif op == "disarm":
                _reply(conn, ok=True, arrived=eng.imm_disarm(cmd["imm"]))
            elif op == "recv":
                try:
                    m = inbox.get(timeout=cmd.get("timeout", 10))
                except queue.Empty:
                    _reply(conn, ok=False, error="Empty")
                    continue
                _reply(conn, ok=True, src_id=m.src_id, peer_known=m.peer is not None)
                conn.send_bytes(m.data)
            elif op == "send":
                data = conn.recv_bytes()
                eng.send(peer, data).result(30)
                _reply(conn, ok=True)
            elif op == "import":
                remotes[cmd["name"]] = eng.import_region(peer, conn.recv_bytes())
                _reply(conn, ok=True, nbytes=remotes[cmd["name"]].nbytes)
            elif op == "write":
                # Writes `nbytes` of a seeded pattern into the parent's region.
                n = cmd["nbytes"]
                src = np.random.default_rng(cmd["seed"]).integers(0, 256, n, dtype=np.uint8)
                with eng.register(src) as r:
                    eng.write(
                        r, remotes[cmd["name"]], n, dst_offset=cmd.get("dst_offset", 0), imm=cmd.get("imm"),
                        timeout_ms=cmd.get("timeout_ms", 0),
                    ).result(30)
                _reply(conn, ok=True)
            elif op == "write_imm":
                for _ in range(cmd["n"]):
                    eng.write_imm(peer, cmd["imm"]).result(30)
                _reply(conn, ok=True)
            elif op == "stats":
                _reply(conn, ok=True, **eng.stats()._asdict())
            else:
                _reply(conn, ok=False, error="UnknownCommand", message=op)
        except Exception as ex:  # noqa: BLE001 - reported to the parent test
            _reply(conn, ok=False, **_err(ex))


class Remote:
    """The parent's handle on a child engine."""

    def __init__(self, provider: str, **extra: Any):
        self.provider = provider
        for attempt in range(3):
            self.conn, child = _CTX.Pipe()
            self.proc = _CTX.Process(target=serve, args=(child, provider, extra), daemon=True)
            self.proc.start()
            child.close()
            hello = self._recv_json(60)
            if "error" not in hello:
                break
            self.proc.join(5)
            self.conn.close()
            # shm names its queue after the process id: a process killed
            # earlier (by a test or anyone else) leaves /dev/shm/<pid>:* behind,
            # and a new process that gets the same pid cannot open its queue
            # (EBUSY). Another process, another pid.
            if not (provider == "shm" and hello.get("errno") == errno.EBUSY) or attempt == 2:
                raise RemoteUnavailable(hello)
        self.id = hello["id"]
        self.msg_max = hello["msg_max"]
        self.nics = hello["nics"]
        self.address = self.conn.recv_bytes()

    def connect(self, engine) -> "Any":
        """Exchanges addresses with `engine` and returns its Peer for the child."""
        self.conn.send_bytes(engine.address)
        return engine.add_peer(self.address)

    def _recv_json(self, timeout: float) -> Dict[str, Any]:
        if not self.conn.poll(timeout):
            raise AssertionError(f"child did not answer within {timeout} s (alive: {self.proc.is_alive()})")
        return json.loads(self.conn.recv_bytes())

    def call(self, op: str, _blob: Optional[bytes] = None, _timeout: float = 60, **kw: Any) -> Dict[str, Any]:
        self.conn.send_bytes(json.dumps(dict(op=op, **kw)).encode())
        if _blob is not None:
            self.conn.send_bytes(_blob)
        r = self._recv_json(_timeout)
        return r

    def check(self, op: str, _blob: Optional[bytes] = None, **kw: Any) -> Dict[str, Any]:
        r = self.call(op, _blob, **kw)
        assert r.get("ok"), f"child {op} failed: {r}"
        return r

    def blob(self, timeout: float = 60) -> bytes:
        assert self.conn.poll(timeout), "child sent no data"
        return self.conn.recv_bytes()

    def region(self, name: str, nbytes: int, guard: int = 0) -> bytes:
        self.check("region", name=name, nbytes=nbytes, guard=guard)
        return self.blob()

    def read(self, name: str) -> bytes:
        r = self.check("read", name=name)
        data = self.blob()
        assert r["guard_intact"], "bytes outside the child's region were written"
        return data

    def close(self) -> None:
        if self.proc.is_alive():
            try:
                self.call("quit", _timeout=30)
            except (OSError, EOFError, AssertionError):
                pass
        self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)
        self.conn.close()

    def kill(self) -> None:
        """SIGKILL, then removes the shm queues the dead process leaves behind
        (see __init__): they would outlive it in /dev/shm."""
        pid = self.proc.pid
        self.proc.kill()
        self.proc.join(10)
        if pid is not None:
            pattern = re.compile(rf"^{pid}:\d+:\d+$")
            try:
                names = [n for n in os.listdir("/dev/shm") if pattern.match(n)]
            except OSError:
                names = []
            for n in names:
                try:
                    os.unlink(os.path.join("/dev/shm", n))
                except OSError:
                    pass


class RemoteUnavailable(Exception):
    def __init__(self, reply: Dict[str, Any]):
        super().__init__(reply.get("message", str(reply)))
        self.reply = reply


def wait_until(pred, timeout: float, interval: float = 0.01) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(interval)
    return pred()
