"""Telemetry from Python: engine.telemetry() against a known sequence of
operations (one failing on purpose), engine.metrics() parsed by the reference
parser (prometheus_client), and engine.serve_metrics() scraped over HTTP."""
from __future__ import annotations

import math
import urllib.error
import urllib.request
from typing import Any, Dict, Tuple

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

import xfer
from xfer import _lib
from conftest import make_engine

HDR = 16  # XI_MSG_HDR: a NIC counts whole messages


def _pair(provider: str, **kw: Any) -> Tuple[xfer.Engine, xfer.Engine, xfer.Peer, xfer.Peer]:
    a = make_engine(provider, heartbeat_ms=0, **kw)  # no probes: every message is the test's
    b = make_engine(provider, heartbeat_ms=0, **kw)
    return a, b, a.add_peer(b.address), b.add_peer(a.address)


def _close(*engines: xfer.Engine) -> None:
    # Peers first: on ofi-shm, a BYE to an engine of this process already gone
    # crashes inside libfabric 1.17 (see tests/test_telemetry.c).
    for e in engines:
        for p in list(e._core.peers):
            _lib.xfer_peer_remove(e._core.h, p)
    for e in engines:
        e.close()


def _run_sequence(a: xfer.Engine, b: xfer.Engine, pa: xfer.Peer) -> int:
    """Two writes (the second with an immediate), an immediate alone, two
    messages, an expectation that times out, then a write into a revoked
    region; returns that write's result (0 without delivery-complete, on
    ofi-shm, which reports success)."""
    target = np.zeros(4096, np.uint8)
    rb = b.register(target)
    dst = a.import_region(pa, rb.descriptor)
    src = a.register(np.full(4096, 3, np.uint8))
    assert a.write(src, dst, 4096).result(10) == 0
    assert a.write(src, dst, 1000, imm=0x51).result(10) == 0
    assert a.write_imm(pa, 0x52).result(10) == 0
    assert a.send(pa, b"x" * 10).result(10) == 0
    assert a.send(pa, b"y" * 20).result(10) == 0
    with pytest.raises(xfer.TimeoutError):
        a.expect_imm(0x53, 1, timeout_ms=50).result(10)
    assert b.expect_imm(0x51, 1).result(10) == 0
    assert b.expect_imm(0x52, 1).result(10) == 0
    assert len(b.recv(10).data) == 10 and len(b.recv(10).data) == 20
    rb.revoke()
    done = a.write(src, dst, 4096, timeout_ms=5000)
    done.exception(10)
    return done.res


def test_counters_and_histograms_match_a_known_sequence(provider: str) -> None:
    a, b, pa, pb = _pair(provider)
    try:
        res = _run_sequence(a, b, pa)
        assert (res < 0) if a.nic_info(0).delivery_complete else (res == 0)
        failed = res < 0
        code = _lib.XFER_STATS_CODE_NAMES[_lib.xfer_stats_code_of(res)] if failed else None
        t = a.telemetry()
        assert t["enabled"] is True and t["submit_again"] == 0
        assert t["ops_completed"] == t["ops_submitted"] == 7 and t["ops_failed"] == 1 + failed
        p = t["peers"][pa.index]
        assert p["engine_id"] == b.id and p["state"] == "live"
        assert (p["ops"], p["writes"], p["bytes_written"]) == (6, 4, 2 * 4096 + 1000)
        assert (p["sends"], p["bytes_sent"], p["msgs_received"], p["bytes_received"]) == (2, 30, 0, 0)
        assert p["errors"] == ({code: 1} if failed else {})
        want = {"ETIMEDOUT": 1}
        if failed:
            want[code] = want.get(code, 0) + 1
        assert t["errors"] == want
        assert t["timeouts"] == 1 + (res == -110) and p["timeouts"] == (res == -110)
        nic = t["nics"][0]
        assert nic["name"] == a.nics[0]
        assert (nic["writes"], nic["bytes_written"]) == (4, 2 * 4096 + 1000)
        assert (nic["sends"], nic["bytes_sent"]) == (2, 30 + 2 * HDR)
        assert nic["retries"] == t["retries"] >= p["retries"]
        lat = t["latency"]
        counts = {k: v["count"] for k, v in lat.items() if v["count"]}
        assert counts == {"write": 3, "imm": 1, "send": 2, "expect": 1}
        for v in lat.values():
            assert sum(v["buckets"]) == v["count"] and len(v["buckets"]) == _lib.XFER_STATS_BUCKETS
        # The expectation waited out its 50 ms (how much longer depends on the
        # load): one sample, the sum, in the bucket (2**(lb-1), 2**lb] ns that holds it.
        ns = lat["expect"]["sum_ns"]
        lb = next(i for i, n in enumerate(lat["expect"]["buckets"]) if n)
        assert ns >= 50_000_000 and lb >= 26 and lat["expect"]["buckets"][lb] == 1
        assert 2 ** (lb - 1) < ns <= 2 ** lb

        tb = b.telemetry()
        assert tb["nics"][0]["imms_received"] == 2
        assert (tb["nics"][0]["msgs_received"], tb["nics"][0]["bytes_received"]) == (2, 30 + 2 * HDR)
        assert (tb["peers"][pb.index]["msgs_received"], tb["peers"][pb.index]["bytes_received"]) == (2, 30)

        # Removal folds the peer into removed_peers.
        before = a.telemetry()["peers"][pa.index]
        pa.remove()
        t = a.telemetry()
        assert pa.index not in t["peers"]
        r = t["removed_peers"]
        assert (r["ops"], r["writes"], r["bytes_written"], r["errors"]) == (
            before["ops"], before["writes"], before["bytes_written"], before["errors"])
    finally:
        _close(a, b)


def _families(text: str) -> Dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def _value(fams: Dict[str, Any], family: str, sample: str, **labels: str) -> float:
    hits = [s.value for s in fams[family].samples
            if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(hits) == 1, (family, sample, labels, hits)
    return hits[0]


def test_prometheus_text_parses_and_agrees(provider: str) -> None:
    a, b, pa, _ = _pair(provider)
    try:
        res = _run_sequence(a, b, pa)
        t = a.telemetry()
        text = a.metrics()
        fams = _families(text)  # the reference parser: raises on a malformed line
        eng = f"{a.id:016x}"
        peer = {"engine": eng, "peer": str(pa.index), "peer_engine": f"{b.id:016x}"}
        # prometheus_client names counter families without their _total.
        assert fams["xfer_peer_writes"].type == "counter"
        assert _value(fams, "xfer_peer_writes", "xfer_peer_writes_total", **peer) == 4
        assert _value(fams, "xfer_peer_written_bytes", "xfer_peer_written_bytes_total", **peer) == 2 * 4096 + 1000
        assert _value(fams, "xfer_peer_live", "xfer_peer_live", **peer) == 1
        assert _value(fams, "xfer_ops_completed", "xfer_ops_completed_total", engine=eng) == t["ops_completed"]
        assert _value(fams, "xfer_errors", "xfer_errors_total", engine=eng, code="ETIMEDOUT") == t["errors"]["ETIMEDOUT"]
        if res < 0:
            code = _lib.XFER_STATS_CODE_NAMES[_lib.xfer_stats_code_of(res)]
            assert _value(fams, "xfer_peer_errors", "xfer_peer_errors_total", code=code, **peer) == 1
        nic = {"engine": eng, "nic": "0", "domain": a.nics[0]}
        assert _value(fams, "xfer_nic_sends", "xfer_nic_sends_total", **nic) == 2
        assert _value(fams, "xfer_telemetry_enabled", "xfer_telemetry_enabled", engine=eng) == 1
        # The histogram: cumulative buckets up to +Inf, equal to the dict's.
        h = fams["xfer_op_latency_seconds"]
        assert h.type == "histogram"
        for kind in ("write", "send", "imm", "expect"):
            buckets = [(float(s.labels["le"]), s.value) for s in h.samples
                       if s.name.endswith("_bucket") and s.labels["kind"] == kind]
            assert len(buckets) == _lib.XFER_STATS_BUCKETS and math.isinf(buckets[-1][0])
            assert [le for le, _ in buckets] == sorted(le for le, _ in buckets)
            raw = t["latency"][kind]["buckets"]
            cum = [sum(raw[: i + 1]) for i in range(len(raw))]
            assert [v for _, v in buckets] == cum
            assert buckets[0][0] == pytest.approx(1e-9) and buckets[10][0] == pytest.approx(1024e-9)
            assert _value(fams, "xfer_op_latency_seconds", "xfer_op_latency_seconds_count",
                          engine=eng, kind=kind) == t["latency"][kind]["count"]
            assert _value(fams, "xfer_op_latency_seconds", "xfer_op_latency_seconds_sum",
                          engine=eng, kind=kind) == pytest.approx(t["latency"][kind]["sum_ns"] / 1e9)
        assert not any(s.labels.get("kind") == "paged" for s in h.samples)  # kinds seen only
        # Removed peers get a series of their own.
        pa.remove()
        fams = _families(a.metrics())
        assert _value(fams, "xfer_peer_writes", "xfer_peer_writes_total", engine=eng, peer="removed") == 4
        assert not any(s.labels.get("peer") == str(pa.index) for s in fams["xfer_peer_writes"].samples)
    finally:
        _close(a, b)


def test_serve_metrics_over_http(provider: str) -> None:
    a, b, pa, _ = _pair(provider)
    try:
        assert a.write_imm(pa, 7).result(10) == 0
        with pytest.raises(xfer.InvalidArgument):
            a.serve_metrics(70000)
        server = a.serve_metrics(0)
        assert server.port > 0 and server.url.endswith("/metrics")
        with urllib.request.urlopen(server.url, timeout=10) as r:
            assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            fams = _families(r.read().decode())
        eng = f"{a.id:016x}"
        assert _value(fams, "xfer_op_latency_seconds", "xfer_op_latency_seconds_count", engine=eng, kind="imm") == 1
        with pytest.raises(urllib.error.HTTPError) as ei:
            urllib.request.urlopen(server.url.replace("/metrics", "/nothing"), timeout=10)
        assert ei.value.code == 404
        # A second scrape sees new work.
        assert a.write_imm(pa, 7).result(10) == 0
        with urllib.request.urlopen(server.url, timeout=10) as r:
            fams = _families(r.read().decode())
        assert _value(fams, "xfer_op_latency_seconds", "xfer_op_latency_seconds_count", engine=eng, kind="imm") == 2
        # The engine's close stops the server and frees its port.
        other = a.serve_metrics(0)
        server.close()
        server.close()  # idempotent
        with pytest.raises(OSError):
            urllib.request.urlopen(server.url, timeout=5)
    finally:
        _close(a, b)
    with pytest.raises(OSError):
        urllib.request.urlopen(other.url, timeout=5)
    with pytest.raises(xfer.Shutdown):
        a.serve_metrics(0)
    assert a.telemetry()["latency"]["imm"]["count"] == 2  # still readable once closed


def test_telemetry_off(provider: str, monkeypatch: Any) -> None:
    monkeypatch.setenv("XFER_TELEMETRY", "0")  # read at engine creation
    a, b, pa, _ = _pair(provider)
    monkeypatch.delenv("XFER_TELEMETRY")
    try:
        assert a.write_imm(pa, 7).result(10) == 0
        t = a.telemetry()
        assert t["enabled"] is False and t["ops_completed"] == 1
        assert t["peers"][pa.index]["ops"] == 0 and t["nics"][0]["writes"] == 0
        assert all(v["count"] == 0 for v in t["latency"].values())
        fams = _families(a.metrics())
        assert _value(fams, "xfer_telemetry_enabled", "xfer_telemetry_enabled", engine=f"{a.id:016x}") == 0
        a.set_telemetry(True)  # at run time: the next operation counts
        assert a.write_imm(pa, 7).result(10) == 0
        t = a.telemetry()
        assert t["enabled"] is True and t["peers"][pa.index]["ops"] == 1 and t["latency"]["imm"]["count"] == 1
    finally:
        _close(a, b)


def test_code_names_match_the_library() -> None:
    names = [_lib.xfer_stats_code_name(i).decode() for i in range(_lib.XFER_STATS_CODES)]
    assert tuple(names) == _lib.XFER_STATS_CODE_NAMES
    assert _lib.xfer_stats_code_name(_lib.XFER_STATS_CODES) is None
    assert _lib.xfer_stats_code_of(0) == -1 and _lib.xfer_stats_code_of(-110) == _lib.XFER_STATS_ETIMEDOUT
    assert _lib.xfer_stats_code_of(-_lib.XFER_EPEER) == _lib.XFER_STATS_EPEER
