"""Telemetry for Python: the ``xfer_stats_*`` structures as one dict
(:func:`telemetry`), their Prometheus text (:func:`prometheus_text`, rendered
in C by ``xfer_stats_prometheus``) and a tiny HTTP endpoint that serves it
(:class:`MetricsServer`).

The endpoint is Python's own ``http.server`` on a daemon thread, not C: a
scrape is a few per second at most, the application chooses whether and where
to listen, and the library stays free of sockets it does not need. Each
scrape reads the counters the worker keeps; it never calls onto the worker
and takes no lock the data path takes.
"""
from __future__ import annotations

import ctypes
import errno
import threading
from ctypes import byref, c_size_t, c_uint32, sizeof
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, Optional

from . import _lib
from ._errors import check

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
KIND_NAMES = {
    _lib.XFER_OP_SEND: "send",
    _lib.XFER_OP_WRITE: "write",
    _lib.XFER_OP_PAGED: "paged",
    _lib.XFER_OP_IMM: "imm",
    _lib.XFER_OP_EXPECT: "expect",
    _lib.XFER_OP_CANCEL: "cancel",
    _lib.XFER_OP_SCATTER: "scatter",
    _lib.XFER_OP_BARRIER: "barrier",
}
# Bucket i counts latencies in (2**(i-1), 2**i] ns; the last one has no bound.
BUCKET_BOUNDS_NS = tuple(1 << i for i in range(_lib.XFER_STATS_BUCKETS - 1)) + (None,)
_PEER_STATES = {_lib.XFER_PEER_LIVE: "live", _lib.XFER_PEER_DEAD: "dead"}


def _sized(cls: Any) -> Any:
    s = cls()
    s.size = sizeof(cls)
    return s


def _errors(arr: Any) -> Dict[str, int]:
    """The error classes that occurred, by name (xfer_stats_code_name)."""
    return {_lib.XFER_STATS_CODE_NAMES[i]: int(n) for i, n in enumerate(arr) if n}


def _fields(s: Any, skip: tuple) -> Dict[str, Any]:
    return {f: int(getattr(s, f)) for f, _ in s._fields_ if f not in skip}


def telemetry(h: int, nic_names: list) -> Dict[str, Any]:
    """Every figure of the engine ``h`` as plain Python values (see docs/python.md)."""
    base = _lib.xfer_stats()
    _lib.xfer_engine_stats(h, byref(base))
    eng = _sized(_lib.xfer_stats_engine_t)
    check(_lib.xfer_stats_engine(h, byref(eng)), "xfer_stats_engine")
    out: Dict[str, Any] = {
        "enabled": bool(eng.enabled),
        **{f: int(getattr(base, f)) for f, _ in base._fields_},
        "submit_again": int(eng.submit_again),
        "retries": int(eng.retries),
        "timeouts": int(eng.timeouts),
        "errors": _errors(eng.errors),
    }
    n = _lib.xfer_stats_peers(h, None, 0)
    ids = (c_uint32 * max(n, 1))()
    n = min(check(_lib.xfer_stats_peers(h, ids, n), "xfer_stats_peers"), n)
    peers: Dict[int, Dict[str, Any]] = {}
    for i in range(n):
        p = _sized(_lib.xfer_stats_peer_t)
        if _lib.xfer_stats_peer(h, ids[i], byref(p)) != 0:
            continue  # removed meanwhile: its figures are in removed_peers
        d = _fields(p, ("size", "peer", "state", "reserved", "errors"))
        d["state"] = _PEER_STATES.get(p.state, str(p.state))
        d["errors"] = _errors(p.errors)
        peers[int(p.peer)] = d
    out["peers"] = peers
    r = _sized(_lib.xfer_stats_peer_t)
    check(_lib.xfer_stats_peer(h, _lib.XFER_PEER_NONE, byref(r)), "xfer_stats_peer")
    out["removed_peers"] = {**_fields(r, ("size", "peer", "engine_id", "state", "reserved", "errors")),
                            "errors": _errors(r.errors)}
    nics = []
    for i, name in enumerate(nic_names):
        s = _sized(_lib.xfer_stats_nic_t)
        check(_lib.xfer_stats_nic(h, i, byref(s)), "xfer_stats_nic")
        nics.append({"nic": i, "name": name, **_fields(s, ("size", "nic"))})
    out["nics"] = nics
    lat: Dict[str, Dict[str, Any]] = {}
    for kind, name in KIND_NAMES.items():
        s = _sized(_lib.xfer_stats_latency_t)
        check(_lib.xfer_stats_latency(h, kind, byref(s)), "xfer_stats_latency")
        lat[name] = {"count": int(s.count), "sum_ns": int(s.sum_ns), "buckets": [int(b) for b in s.buckets]}
    out["latency"] = lat
    return out


def prometheus_text(h: int) -> str:
    """``xfer_stats_prometheus``: the text grows between two calls when a
    peer is added meanwhile, so the buffer is sized from the answer and some room."""
    need = c_size_t(0)
    cap = 1 << 16
    while True:
        buf = ctypes.create_string_buffer(cap)
        n = _lib.xfer_stats_prometheus(h, buf, cap, byref(need))
        if n >= 0:
            return buf.raw[:n].decode("utf-8", "replace")
        if n != -errno.ENOSPC:
            check(n, "xfer_stats_prometheus")
        cap = int(need.value) + 4096


class MetricsServer:
    """Serves ``GET /metrics`` (the Prometheus text of one engine) on
    ``host:port``, from a daemon thread, until :meth:`close` or the engine's
    close. ``port`` 0 picks a free port (see :attr:`port`)."""

    def __init__(self, core: Any, host: str, port: int):
        self._lock = threading.Lock()
        self._core: Optional[Any] = core  # keeps the C engine alive while serving
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                if self.path.split("?", 1)[0] not in ("/metrics", "/"):
                    self.send_error(404, "only /metrics is served")
                    return
                body = server._render()
                if body is None:
                    self.send_error(503, "the engine is closed")
                    return
                data = body.encode()
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass  # a scrape every few seconds is no news

        self._httpd = ThreadingHTTPServer((host, port), Handler)
        self._httpd.daemon_threads = True
        self.host = host
        self.port = int(self._httpd.server_address[1])
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.2},
                                        name=f"xfer-metrics-{self.port}", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def _render(self) -> Optional[str]:
        with self._lock:
            core = self._core
            if core is None:
                return None
            return prometheus_text(core.h)

    def close(self) -> None:
        """Stops serving and frees the port. Idempotent."""
        with self._lock:
            if self._core is None:
                return
            core, self._core = self._core, None
        if threading.current_thread() is not self._thread:
            self._httpd.shutdown()
        self._httpd.server_close()
        servers = getattr(core, "metrics_servers", None)
        if servers is not None and self in servers:
            servers.remove(self)

    def __enter__(self) -> "MetricsServer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<xfer.MetricsServer {self.url}{' closed' if self._core is None else ''}>"
