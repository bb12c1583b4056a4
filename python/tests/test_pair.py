"""Every operation between two processes, on each provider, with the data verified.

The child process (remote.py) owns the target memory; it hands its bytes back
over the pipe so that each test compares them with what was written.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time

import numpy as np
import pytest

import xfer
from conftest import Pair, make_engine
from remote import Remote, wait_until

pytestmark = pytest.mark.pair

KIB = 1024


def rand_bytes(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


def test_identity(pair: Pair) -> None:
    info = pair.remote.check("info")
    assert isinstance(pair.engine.address, bytes) and len(pair.engine.address) > 0
    assert pair.peer.id == pair.remote.id == info["id"]
    assert info["peer_id"] == pair.engine.id
    assert pair.peer.state == "live"
    assert pair.provider.split(";")[0] in pair.engine.provider


def test_send_and_receive_both_ways(pair: Pair) -> None:
    eng, remote, peer = pair.engine, pair.remote, pair.peer
    payloads = [
        b"",
        b"x",
        bytes(range(256)) * 3,
        bytearray(b"bytearray payload"),
        memoryview(b"a memoryview of bytes"),
        np.arange(100, dtype=np.float32),
        rand_bytes(eng.msg_max, 1).tobytes(),
    ]
    for data in payloads:
        eng.send(peer, data).result(30)
        r = remote.check("recv")
        got = remote.blob()
        assert got == bytes(memoryview(data).cast("B")), f"payload of {len(got)} bytes differs"
        assert r["src_id"] == eng.id and r["peer_known"]
    # The child sends; this engine receives with recv() (no on_recv here).
    assert eng.try_recv() is None
    for i in range(3):
        remote.check("send", _blob=b"from child %d" % i)
        m = eng.recv(timeout=30)
        assert m.data == b"from child %d" % i
        assert m.src_id == remote.id and m.peer is peer
    remote.check("send", _blob=b"into a buffer")
    buf = bytearray(64)
    n, src = eng.recv_into(buf, timeout=30)
    assert (n, src) == (13, remote.id) and bytes(buf[:n]) == b"into a buffer"
    with pytest.raises(xfer.TimeoutError) as ei:
        eng.recv(timeout=0.05)
    assert isinstance(ei.value, TimeoutError) and ei.value.errno == 110
    with pytest.raises(xfer.MessageTooLong):
        eng.send(peer, bytes(eng.msg_max + 1))


def test_write_whole_region_with_imm(pair: Pair) -> None:
    eng, remote, peer = pair.engine, pair.remote, pair.peer
    n = 1 << 20
    desc = remote.region("w1", n, guard=4096)
    dst = eng.import_region(peer, desc)
    assert dst.nbytes == n and dst.peer is peer
    src_arr = rand_bytes(n, 2)
    with eng.register(src_arr) as src:
        assert src.nbytes == n and src.ptr == src_arr.ctypes.data
        remote.check("expect", key="w1", imm=101, count=1)
        c = eng.write(src, dst, imm=101)
        assert c.result(30) == 0 and c.done() and c.res == 0 and c.kind == xfer.OP_WRITE
        w = remote.check("wait", key="w1")
        assert w["res"] == 0 and w["kind"] == xfer.OP_EXPECT
    assert remote.read("w1") == src_arr.tobytes()


def test_write_offsets_and_dtypes(pair: Pair) -> None:
    eng, remote, peer = pair.engine, pair.remote, pair.peer
    n = 256 * KIB
    dst = eng.import_region(peer, remote.region("w2", n, guard=64))
    expect = np.zeros(n, np.uint8)
    f32 = np.random.default_rng(3).standard_normal(8192).astype(np.float32)  # 32 KiB
    u64 = np.arange(4096, dtype=np.uint64) * 0x0101010101010101  # 32 KiB
    ba = bytearray(rand_bytes(10000, 4).tobytes())
    regions = [eng.register(f32), eng.register(u64), eng.register(ba), eng.register(memoryview(bytearray(b"\x7f" * 4096)))]
    plan = [  # (region, src_offset, dst_offset, nbytes)
        (regions[0], 0, 0, f32.nbytes),
        (regions[1], 8, 40000, u64.nbytes - 8),
        (regions[2], 1, 100001, 9999),
        (regions[3], 0, n - 4096, 4096),  # the last byte of the region
        (regions[0], 1000, 200000, 1),
    ]
    ops = []
    for r, so, do, nb in plan:
        ops.append(eng.write(r, dst, nb, src_offset=so, dst_offset=do, imm=102))
        raw = np.frombuffer(memoryview(r.obj).cast("B"), dtype=np.uint8)
        expect[do : do + nb] = raw[so : so + nb]
    remote.check("expect", key="w2", imm=102, count=len(plan))
    xfer.wait(ops, timeout=30)
    assert remote.check("wait", key="w2")["res"] == 0
    assert remote.read("w2") == expect.tobytes()
    for r in regions:
        r.close()
    assert all(r.closed for r in regions)


def test_zero_length_write_delivers_only_the_immediate(pair: Pair) -> None:
    eng, remote, peer = pair.engine, pair.remote, pair.peer
    dst = eng.import_region(peer, remote.region("z", 4096, guard=16))
    remote.check("expect", key="z", imm=103, count=3)
    ops = [eng.write(None, dst, 0, dst_offset=off, imm=103) for off in (0, 100, 4096)]
    xfer.wait(ops, timeout=30)
    assert remote.check("wait", key="z")["res"] == 0
    assert remote.read("z") == bytes(4096)


@pytest.mark.parametrize("index_dtype", [np.uint32, np.int32, "list"])
def test_paged_write_1000_pages(pair: Pair, index_dtype) -> None:
    eng, remote, peer = pair.engine, pair.remote, pair.peer
    pages, page, stride = 1000, 512, 640  # destination pages are strided, with gaps
    name = f"p-{getattr(index_dtype, '__name__', index_dtype)}"
    dst = eng.import_region(peer, remote.region(name, 256 + pages * stride, guard=128))
    src_arr = rand_bytes(pages * page, 5)
    rng = np.random.default_rng(6)
    sp = rng.permutation(pages)
    dp = rng.permutation(pages)
    if index_dtype == "list":
        sp_arg, dp_arg = sp.tolist(), dp.tolist()
    else:
        sp_arg, dp_arg = sp.astype(index_dtype), dp.astype(index_dtype)
    with eng.register(src_arr) as src:
        remote.check("expect", key=name, imm=104, count=pages)
        done = threading.Event()
        c = eng.write_paged(src, dst, sp_arg, dp_arg, page, dst_stride=stride, dst_base=256, imm=104, callback=lambda _: done.set())
        del sp_arg, dp_arg  # the completion keeps the index arrays alive
        assert c.result(60) == 0 and c.kind == xfer.OP_PAGED
        assert done.wait(5)
        assert remote.check("wait", key=name, timeout=60)["res"] == 0
    got = np.frombuffer(remote.read(name), dtype=np.uint8)
    want = np.zeros_like(got)
    for s, d in zip(sp, dp):
        want[256 + d * stride : 256 + d * stride + page] = src_arr[s * page : (s + 1) * page]
    assert np.array_equal(got, want)


def test_immediates_expect_and_disarm(pair: Pair) -> None:
    eng, remote, peer = pair.engine, pair.remote, pair.peer
    # Arrivals before arming count.
    xfer.wait([eng.write_imm(peer, 105) for _ in range(10)], timeout=30)
    remote.check("expect", key="e1", imm=105, count=10)
    assert remote.check("wait", key="e1")["res"] == 0
    # Already armed: the second expectation fails with Busy.
    remote.check("expect", key="e2", imm=106, count=100)
    remote.check("expect", key="e3", imm=106, count=1)
    w = remote.check("wait", key="e3")
    assert w["error"] == "Busy"
    # Partial count, then disarm: the count comes back, the expectation is cancelled.
    before = remote.check("stats")["imms_received"]
    xfer.wait([peer.write_imm(106) for _ in range(7)], timeout=30)
    assert wait_until(lambda: remote.check("stats")["imms_received"] == before + 7, 10)
    assert remote.check("disarm", imm=106)["arrived"] == 7
    w = remote.check("wait", key="e2")
    assert w["error"] == "Cancelled" and w["res"] == -125
    assert remote.check("disarm", imm=106)["arrived"] == 0
    # A deadline passes: TimeoutError carrying ETIMEDOUT.
    remote.check("expect", key="e4", imm=107, count=1, timeout_ms=100)
    w = remote.check("wait", key="e4")
    assert w["error"] == "TimeoutError" and w["errno"] == 110


def test_local_expectations(pair: Pair) -> None:
    eng, remote, peer = pair.engine, pair.remote, pair.peer
    c = eng.expect_imm(108, 5)
    with pytest.raises(xfer.TimeoutError):
        c.result(timeout=0.05)  # still pending: the wait times out, the op goes on
    assert not c.done() and c.res is None
    remote.check("write_imm", imm=108, n=5)
    assert c.result(30) == 0 and c.kind == xfer.OP_EXPECT
    with pytest.raises(xfer.TimeoutError):
        eng.expect_imm(109, 1, timeout_ms=50).result(30)


def test_child_writes_into_parent(pair: Pair) -> None:
    eng, remote = pair.engine, pair.remote
    buf = np.zeros(64 * KIB, np.uint8)
    with eng.register(buf) as r:
        remote.check("import", _blob=r.descriptor, name="parent")
        exp = eng.expect_imm(110, 2)
        remote.check("write", name="parent", nbytes=32 * KIB, seed=7, imm=110)
        remote.check("write", name="parent", nbytes=1000, seed=8, dst_offset=40000, imm=110)
        assert exp.result(30) == 0
    want = np.zeros(64 * KIB, np.uint8)
    want[: 32 * KIB] = rand_bytes(32 * KIB, 7)
    want[40000:41000] = rand_bytes(1000, 8)
    assert np.array_equal(buf, want)


def test_callbacks_futures_and_asyncio(pair: Pair) -> None:
    eng, remote, peer = pair.engine, pair.remote, pair.peer
    dst = eng.import_region(peer, remote.region("cb", 4096))
    src_arr = rand_bytes(4096, 9)
    seen = []
    with eng.register(src_arr) as src:
        c = eng.write(src, dst, callback=lambda c: seen.append((c, threading.current_thread().name)))
        c.add_done_callback(lambda c: seen.append((c, "added")))
        c.result(30)
        assert wait_until(lambda: len(seen) == 2, 5)
        assert seen[0][0] is c and seen[0][1].startswith("xfer-reaper")
        late = []
        c.add_done_callback(late.append)  # already done: runs at once, here
        assert late == [c]
        futs = [eng.write(src, dst, 100, dst_offset=i * 100).future for i in range(10)]
        done, not_done = concurrent.futures.wait(futs, timeout=30)
        assert not not_done and all(f.result() == 0 for f in done)

        async def main() -> int:
            return await eng.write(src, dst, 4096)

        assert asyncio.run(main()) == 0
    assert remote.read("cb") == src_arr.tobytes()


def test_cancel_by_tag(pair: Pair) -> None:
    eng, remote, peer = pair.engine, pair.remote, pair.peer
    dst = eng.import_region(peer, remote.region("cancel", 64 * KIB))
    pages = np.arange(64, dtype=np.uint32)
    with eng.register(np.zeros(64 * KIB, np.uint8)) as src:
        ops = [eng.write_paged(src, dst, pages, pages, 1024, tag=9) for _ in range(40)]
        other = eng.write_imm(peer, 1, tag=10)
        cut = eng.cancel(9).result(30)
        assert 0 <= cut <= len(ops)
        results = [o.exception(30) for o in ops]  # each completes exactly once
        cancelled = [r for r in results if r is not None]
        assert all(isinstance(r, xfer.Cancelled) for r in cancelled), results
        assert len(cancelled) == cut
        assert other.result(10) == 0  # another tag is untouched
        assert eng.pending_count == 0
    with pytest.raises(xfer.InvalidArgument):
        eng.cancel(0)


def test_removed_peer_makes_regions_stale(pair: Pair) -> None:
    eng, remote = pair.engine, pair.remote
    desc = remote.region("stale", 4096)
    second = eng.add_peer(remote.address)  # the same engine, a second handle
    assert second.index != pair.peer.index and second.id == remote.id
    dst = second.import_region(desc)
    with eng.register(bytearray(4096)) as src:
        eng.write(src, dst, 16).result(30)
        second.remove()
        assert second.state == "removed"
        with pytest.raises(xfer.StaleRegion):
            eng.write(src, dst, 16)
        with pytest.raises((xfer.NotFound, xfer.PeerError)):
            eng.write_imm(second, 1)
        with pytest.raises(xfer.NotFound):
            eng.import_region(second, desc)


def test_peer_failure_raises_peer_error(provider: str) -> None:
    """The child dies; operations to it fail with PeerError and on_peer_down fires once."""
    if provider == "shm":
        pytest.xfail(
            "libxfer gap: on shm, heartbeat probes to a killed process keep completing "
            "(they land in its shared-memory queue), so the peer is never marked dead and "
            "writes to it end with TimeoutError instead of PeerError"
        )
    downs = []
    eng = make_engine(provider, heartbeat_ms=20, heartbeat_misses=5, on_peer_down=lambda p, err: downs.append((p, err)))
    remote = Remote(provider)
    try:
        peer = remote.connect(eng)
        dst = eng.import_region(peer, remote.region("doomed", 4096))
        src = eng.register(bytearray(4096))
        eng.write(src, dst, imm=1).result(30)  # the connection is up
        remote.kill()
        err = None
        deadline = time.monotonic() + 6
        while err is None and time.monotonic() < deadline:
            try:
                eng.write(src, dst, 64, timeout_ms=1000).result(30)
                time.sleep(0.01)
            except xfer.PeerError as ex:
                err = ex
            except (xfer.TimeoutError, xfer.Cancelled):
                # What was in flight when the peer died may end so (the
                # provider's own error) before the peer is declared dead.
                time.sleep(0.01)
        if err is None:
            pytest.xfail(
                "libxfer gap (intermittent on tcp): after the peer process was killed, writes to it "
                f"were never posted and ended with TimeoutError; peer.state is still {peer.state!r} after 6 s"
            )
        assert err.errno == 261 and "peer" in err.strerror
        assert peer.state == "dead"
        with pytest.raises(xfer.PeerError):
            eng.write_imm(peer, 1)
        assert wait_until(lambda: len(downs) == 1, 5)
        assert downs[0][0] is peer and isinstance(downs[0][1], xfer.Error)
        src.close()  # nothing is in flight any more
    finally:
        remote.close()
        eng.close()
