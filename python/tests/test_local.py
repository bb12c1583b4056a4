"""In-process behaviour: bad arguments and their exception types, back-pressure,
cancellation, close semantics, completions without a reaper thread, revocation."""
from __future__ import annotations

import array
import errno
import gc
import threading
import time

import numpy as np
import pytest

import xfer
from conftest import make_engine
from remote import wait_until

pytestmark = pytest.mark.local

LOCAL_PROVIDER = "tcp"


class Two:
    def __init__(self) -> None:
        self.a = make_engine(LOCAL_PROVIDER)
        self.b = make_engine(LOCAL_PROVIDER)
        self.pa = self.a.add_peer(self.b.address)  # a's handle on b
        self.pb = self.b.add_peer(self.a.address)
        self.src_arr = np.arange(8192, dtype=np.uint8)
        self.dst_arr = np.zeros(8192, np.uint8)
        self.src = self.a.register(self.src_arr)
        self.dst_region = self.b.register(self.dst_arr)
        self.dst = self.a.import_region(self.pa, self.dst_region.descriptor)

    def close(self) -> None:
        self.a.close()
        self.b.close()


@pytest.fixture(scope="module")
def two():
    t = Two()
    yield t
    t.close()


def test_error_hierarchy_and_messages() -> None:
    e = xfer.error_for(-errno.ETIMEDOUT, "xfer_cq_wait")
    assert type(e) is xfer.TimeoutError and isinstance(e, TimeoutError) and isinstance(e, OSError)
    assert e.errno == errno.ETIMEDOUT and e.code == -errno.ETIMEDOUT and e.op == "xfer_cq_wait"
    assert e.strerror == xfer.strerror(-errno.ETIMEDOUT)
    assert "ETIMEDOUT" in str(e) and "xfer_cq_wait" in str(e)
    table = {
        -261: xfer.PeerError,
        -errno.EINVAL: xfer.InvalidArgument,
        -errno.EAGAIN: xfer.WouldBlock,
        -257: xfer.BadWire,
        -258: xfer.BadWire,
        -259: xfer.ForeignDescriptor,
        -260: xfer.ProviderMismatch,
        -errno.ECANCELED: xfer.Cancelled,
        -errno.EBUSY: xfer.Busy,
        -errno.ENOENT: xfer.NotFound,
        -errno.ESTALE: xfer.StaleRegion,
        -errno.ESHUTDOWN: xfer.Shutdown,
        -errno.EMSGSIZE: xfer.MessageTooLong,
        -264: xfer.NoProvider,
        -263: xfer.NoGPU,
        -262: xfer.FabricError,
        -errno.ENOSPC: xfer.NoSpace,
        -errno.ENOTCONN: xfer.PeerConnectionError,
        -errno.ECONNRESET: xfer.PeerConnectionError,
        -errno.ECONNREFUSED: xfer.PeerConnectionError,
        -errno.EPIPE: xfer.PeerConnectionError,
        -errno.EIO: xfer.Error,
    }
    for code, cls in table.items():
        ex = xfer.error_for(code)
        assert type(ex) is cls, (code, type(ex))
        assert ex.strerror == xfer.strerror(code) and ex.errno == -code
    assert xfer.Again is xfer.WouldBlock
    assert xfer.strerror(-261) == "peer failed or is unreachable"
    assert xfer.errno_name(-259) == "XFER_EFOREIGN"
    assert issubclass(xfer.InvalidArgument, ValueError)
    # Transport errors are peer errors, and the builtin ConnectionError too.
    ce = xfer.error_for(-errno.ECONNRESET, "write")
    assert isinstance(ce, xfer.PeerError) and isinstance(ce, ConnectionError) and isinstance(ce, xfer.Error)
    assert not isinstance(xfer.error_for(-261), ConnectionError)
    assert xfer.PeerConnectionError.__name__ != "ConnectionError"  # never shadows the builtin
    import pickle

    back = pickle.loads(pickle.dumps(ce))
    assert type(back) is xfer.PeerConnectionError and back.errno == errno.ECONNRESET and back.op == "write"


def test_engine_attributes() -> None:
    with make_engine(LOCAL_PROVIDER, msg_max=1024, submit_depth=64, max_ops=32, timeout_ms=1234) as e:
        assert e.msg_max == 1024 and e.timeout_ms == 1234
        assert e.nics == ["lo"] and "tcp" in e.provider
        assert e.id != 0 and isinstance(e.address, bytes)
        info = e.nic_info(0)
        assert info == e.nic_infos[0] and len(e.nic_infos) == 1
        assert (info.nic, info.provider, info.domain) == (0, e.provider, "lo")
        assert info.delivery_complete is True  # tcp completes a write once it is at the target
        assert info.tx_depth > 0 and info.rx_depth > 0 and info.max_msg >= 1 << 20
        assert info.gpu_path in ("native", "staged")
        for bad in (1, -1, "0"):
            with pytest.raises(xfer.InvalidArgument):
                e.nic_info(bad)  # type: ignore[arg-type]
        with pytest.raises(xfer.MessageTooLong):
            e.send(e.add_peer(e.address), bytes(1025))
    with pytest.raises(xfer.InvalidArgument):
        xfer.Engine(provider="tcp", nics="lo", submit_depth=0)
    with pytest.raises(xfer.InvalidArgument):
        xfer.Engine(provider="tcp", nics="lo", msg_max=-1)
    with pytest.raises(xfer.NoProvider) as ei:
        xfer.Engine(provider="no-such-provider")
    assert ei.value.errno in (264, errno.ENODEV) and ei.value.op == "xfer_engine_create"


def test_write_range_errors(two: Two) -> None:
    a, src, dst = two.a, two.src, two.dst
    n = 8192
    bad = [
        dict(nbytes=n + 1),
        dict(nbytes=n, src_offset=1),
        dict(nbytes=n, dst_offset=1),
        dict(nbytes=1, dst_offset=2**64 - 1),
        dict(nbytes=1, src_offset=n),
        dict(nbytes=2**64 - 1),
        dict(nbytes=0, dst_offset=n + 1),
        dict(nbytes=-1),
        dict(nbytes=4, src_offset=-1),
        dict(nbytes=4, flags=0x80),
    ]
    for kw in bad:
        with pytest.raises(xfer.InvalidArgument):
            a.write(src, dst, **kw)
    with pytest.raises(xfer.InvalidArgument):
        a.write(None, dst, 4)  # data without a source region
    for imm in (-1, 2**32):
        with pytest.raises(xfer.InvalidArgument):
            a.write(src, dst, 4, imm=imm)
    with pytest.raises(xfer.InvalidArgument):
        a.write("not a region", dst)  # type: ignore[arg-type]
    with pytest.raises(xfer.InvalidArgument):
        a.write(two.dst_region, dst, 4)  # a region of the other engine
    assert a.pending_count == 0
    # The edges that must work: the last byte, and zero length at the end.
    exp = two.b.expect_imm(77, 1)
    a.write(src, dst, 1, src_offset=n - 1, dst_offset=n - 1).result(10)
    a.write(None, dst, 0, dst_offset=n, imm=77).result(10)
    exp.result(10)
    assert two.dst_arr[n - 1] == two.src_arr[n - 1]


def test_paged_argument_errors(two: Two) -> None:
    a, src, dst = two.a, two.src, two.dst
    ok = np.array([0, 1], np.uint32)
    with pytest.raises(xfer.InvalidArgument, match="2 source pages but 3"):
        a.write_paged(src, dst, ok, np.array([0, 1, 2], np.uint32), 1024)
    with pytest.raises(xfer.InvalidArgument, match="int32/uint32"):
        a.write_paged(src, dst, np.array([0, 1], np.int64), ok, 1024)
    with pytest.raises(xfer.InvalidArgument, match="int32/uint32"):
        a.write_paged(src, dst, np.array([0.0, 1.0]), ok, 1024)
    with pytest.raises(xfer.InvalidArgument, match="int32/uint32"):
        a.write_paged(src, dst, np.zeros((2, 2), np.uint32), ok, 1024)
    with pytest.raises(xfer.InvalidArgument):
        a.write_paged(src, dst, np.arange(4, dtype=np.uint32)[::2], ok, 1024)  # strided
    with pytest.raises(xfer.InvalidArgument):
        a.write_paged(src, dst, [0, -1], ok, 1024)
    with pytest.raises(xfer.InvalidArgument):
        a.write_paged(src, dst, ok, np.array([0, 2**32 - 1], np.uint32), 1024)  # past the region
    with pytest.raises(xfer.InvalidArgument):
        a.write_paged(src, dst, ok, ok, 1024, dst_stride=2**63)  # index * stride overflows
    with pytest.raises(xfer.InvalidArgument):
        a.write_paged(src, dst, ok, ok, 1024, dst_base=2**64 - 100)
    with pytest.raises(xfer.InvalidArgument):
        a.write_paged(src, dst, [], [], 1024)  # no pages
    with pytest.raises(xfer.InvalidArgument):
        a.write_paged(src, dst, ok, ok, 5000)  # the second page crosses the end
    assert a.pending_count == 0
    # array.array and read-only numpy indices are accepted.
    ro = np.array([1, 0], np.int32)
    ro.flags.writeable = False
    exp = two.b.expect_imm(78, 4)
    a.write_paged(src, dst, array.array("I", [0, 1]), ro, 1024, imm=78).result(10)
    a.write_paged(src, dst, ok, ok, 1024, src_stride=2048, dst_stride=2048, src_base=1024, dst_base=1024, imm=78).result(10)
    exp.result(10)
    assert np.array_equal(two.dst_arr[1024:2048], two.src_arr[:1024])
    assert np.array_equal(two.dst_arr[:1024], two.src_arr[1024:2048])
    assert np.array_equal(two.dst_arr[3072:4096], two.src_arr[3072:4096])


def test_descriptor_and_address_errors() -> None:
    a = make_engine(LOCAL_PROVIDER)
    b = make_engine(LOCAL_PROVIDER)
    c = make_engine(LOCAL_PROVIDER)
    try:
        pb = a.add_peer(b.address)
        pc = a.add_peer(c.address)
        rb = b.register(bytearray(4096))
        desc = rb.descriptor
        assert isinstance(desc, bytes)
        assert a.import_region(pb, desc).nbytes == 4096
        with pytest.raises(xfer.ForeignDescriptor):
            a.import_region(pc, desc)  # b's region offered as c's
        mine = a.register(bytearray(64))
        with pytest.raises(xfer.ForeignDescriptor):
            a.import_region(pb, mine.descriptor)
        with pytest.raises(xfer.BadWire):
            a.import_region(pb, desc[:5])
        with pytest.raises(xfer.BadWire):
            a.import_region(pb, b"")
        corrupt = bytearray(desc)
        corrupt[len(desc) // 2] ^= 1
        with pytest.raises(xfer.BadWire):
            a.import_region(pb, corrupt)
        version = bytearray(desc)
        version[4] = 9
        with pytest.raises(xfer.BadWire) as ei:
            a.import_region(pb, version)
        assert ei.value.errno == 258  # XFER_EVERSION
        with pytest.raises(xfer.BadWire):
            a.add_peer(np.random.default_rng(1).integers(0, 256, 300, dtype=np.uint8).tobytes())
        with pytest.raises(xfer.BadWire):
            a.add_peer(b.address[:-3])
        with pytest.raises(xfer.InvalidArgument):
            a.import_region("peer", desc)  # type: ignore[arg-type]
        with pytest.raises(xfer.InvalidArgument):
            b.import_region(pb, desc)  # a Peer of another engine
        with pytest.raises(xfer.InvalidArgument):
            b.write_imm(pb, 1)
        try:
            s = xfer.Engine(provider="shm")
        except xfer.Error:
            s = None
        if s is not None:
            with s:
                with pytest.raises(xfer.ProviderMismatch):
                    a.add_peer(s.address)
    finally:
        a.close()
        b.close()
        c.close()


def test_closed_handle_reused_by_a_new_region(two: Two) -> None:
    """close() then register() may get the same C handle back; collecting the
    old Region object must not deregister the new one."""
    a, dst = two.a, two.dst
    buf = np.arange(4096, dtype=np.uint8)
    base = a.region_count
    reused = 0
    for _ in range(50):
        old = a.register(buf)
        h = old._h
        old.close()
        new = a.register(buf)
        reused += new._h == h
        del old
        gc.collect()
        assert a.region_count == base + 1 and not new.closed
        a.write(new, dst, 16).result(10)
        new.close()
    assert a.region_count == base


def test_register_errors() -> None:
    with make_engine(LOCAL_PROVIDER) as e:
        for bad in (b"read-only bytes", np.zeros(0), np.zeros(16)[::2], memoryview(b"ro"), "text", 3.5, (0, 10), (1, 2, 3)):
            with pytest.raises(xfer.InvalidArgument):
                e.register(bad)
        ro = np.zeros(8)
        ro.flags.writeable = False
        with pytest.raises(xfer.InvalidArgument, match="read-only"):
            e.register(ro)
        with pytest.raises(xfer.InvalidArgument):
            e.register(0x1000)  # a raw address needs nbytes
        with pytest.raises(xfer.InvalidArgument):
            e.register(bytearray(8), 8)
        assert e.region_count == 0
        # Raw memory: (ptr, nbytes) and an address with nbytes.
        keep = np.zeros(4096, np.uint8)
        r1 = e.register((keep.ctypes.data, keep.nbytes))
        r2 = e.register(keep.ctypes.data, 100)
        r3 = e.register_ptr(keep.ctypes.data + 100, 200)
        assert (r1.ptr, r1.nbytes, r2.nbytes, r3.ptr) == (keep.ctypes.data, 4096, 100, keep.ctypes.data + 100)
        assert e.region_count == 3
        for r in (r1, r2, r3):
            r.close()
            r.close()  # idempotent
        assert e.region_count == 0
        # A registered bytearray cannot be resized under the NIC.
        ba = bytearray(100)
        with e.register(ba):
            with pytest.raises(BufferError):
                ba.extend(b"more")
        ba.extend(b"more")


class FakeCudaArray:
    """Looks like a CuPy/Numba device array (CUDA array interface v3)."""

    def __init__(self) -> None:
        self.__cuda_array_interface__ = {
            "shape": (256,),
            "typestr": "<f4",
            "data": (0x7F0000000000, False),
            "strides": None,
            "version": 3,
        }

    def __dlpack_device__(self):
        return (2, 1)


class FakeCudaTensor:
    """Quacks like a torch CUDA tensor (data_ptr/device/numel/element_size)."""

    __module__ = "torch"

    def __init__(self) -> None:
        import types

        self.device = types.SimpleNamespace(type="cuda", index=0)

    def data_ptr(self) -> int:
        return 0x7F0000000000

    def is_contiguous(self) -> bool:
        return True

    def numel(self) -> int:
        return 1024

    def element_size(self) -> int:
        return 2


def test_device_memory_is_refused_clearly() -> None:
    """Device memory reaches xfer_mr_reg only where libxfer can use CUDA;
    elsewhere (these fake pointers on a machine without a GPU) it is refused
    before the library sees it, naming the device."""
    refused = (xfer.NotSupported, xfer.NoGPU)
    if xfer.cuda_available():
        pytest.skip("a CUDA GPU is usable here: the fake device pointers would reach the driver")
    with make_engine(LOCAL_PROVIDER) as e:
        with pytest.raises(refused, match="cuda:1") as ei:
            e.register(FakeCudaArray())
        assert ei.value.errno in (errno.EOPNOTSUPP, 263)
        with pytest.raises(refused, match="cuda:0"):
            e.register(FakeCudaTensor())  # the torch data_ptr() route
        with pytest.raises(refused, match="cuda:0"):
            e.register_ptr(0x7F0000000000, 4096, device="cuda:0")
        with pytest.raises(refused):
            e.register((0x7F0000000000, 4096), device=xfer.Device("cuda", 0))
        with pytest.raises(xfer.NotSupported, match="rocm:0"):
            e.register_ptr(0x7F0000000000, 4096, device="rocm:0")  # no ROCm in libxfer at all
        with pytest.raises(xfer.InvalidArgument, match="on cpu"):
            e.register(np.zeros(8), device="cuda:0")  # the memory is not where the caller says
        assert e.region_count == 0
        # A DLPack host tensor is fine, and host regions say so.
        x = np.arange(16, dtype=np.float64)
        from xfer._buffers import _dlpack_memory

        m = _dlpack_memory(x)
        assert (m.ptr, m.nbytes, m.device) == (x.ctypes.data, 128, xfer.Device("cpu"))
        with e.register(x) as r:
            assert r.gpu is None and r.device.is_host


def test_send_and_recv_errors(two: Two) -> None:
    with pytest.raises(xfer.TimeoutError):
        two.b.recv(timeout=0.01)
    with pytest.raises(xfer.InvalidArgument):
        two.b.recv_into(b"read-only", timeout=0.01)
    with pytest.raises(xfer.InvalidArgument):
        two.a.send(two.pa, np.zeros(16)[::2])  # not contiguous
    with pytest.raises(xfer.InvalidArgument):
        two.a.expect_imm(1, 0)
    with pytest.raises(xfer.InvalidArgument):
        two.a.expect_imm(2**32, 1)
    with pytest.raises(xfer.InvalidArgument):
        two.a.imm_disarm(-1)
    # Message truncation in recv_into says how long the message was.
    two.a.send(two.pa, b"0123456789").result(10)
    small = bytearray(4)
    n, src = two.b.recv_into(small, timeout=10)
    assert (n, src, bytes(small)) == (10, two.a.id, b"0123")


def test_would_block_when_nobody_reaps() -> None:
    """Tiny queues, no reaper thread: a flood meets WouldBlock, and every
    accepted operation still completes exactly once."""
    a = make_engine(LOCAL_PROVIDER, submit_depth=64, max_ops=32, imm_slots=16, progress_thread=False)
    b = make_engine(LOCAL_PROVIDER)
    try:
        peer = a.add_peer(b.address)
        b.add_peer(a.address)
        accepted, again = [], 0
        while len(accepted) < 2000:
            try:
                accepted.append(a.write_imm(peer, 42))
            except xfer.WouldBlock as ex:
                assert ex.errno == errno.EAGAIN and isinstance(ex, xfer.Again)
                again += 1
                if again % 64 == 0:
                    a.progress()
        assert again > 0
        deadline = time.monotonic() + 30
        while a.pending_count and time.monotonic() < deadline:
            a.progress(0.1)
        assert a.pending_count == 0
        assert all(c.done() and c.res == 0 for c in accepted)
        st = a.stats()
        assert st.ops_completed == st.ops_submitted == 2000 and st.ops_failed == 0
        assert b.expect_imm(42, 2000).result(10) == 0
    finally:
        a.close()
        b.close()


def test_manual_progress_blocking_wait() -> None:
    a = make_engine(LOCAL_PROVIDER, progress_thread=False)
    b = make_engine(LOCAL_PROVIDER, progress_thread=False)
    try:
        peer = a.add_peer(b.address)
        b.add_peer(a.address)
        exp = b.expect_imm(5, 3)
        ops = [a.write_imm(peer, 5) for _ in range(3)]
        assert ops[-1].result(10) == 0  # result() drives progress itself
        assert exp.result(10) == 0
        assert all(o.done() for o in ops)
        assert not [t for t in threading.enumerate() if f"{a.id:x}" in t.name]  # no reaper thread
    finally:
        a.close()
        b.close()


def test_close_cancels_and_releases() -> None:
    e = make_engine(LOCAL_PROVIDER)
    buf = np.zeros(4096, np.uint8)
    r = e.register(buf)
    peer = e.add_peer(e.address)  # loop back to itself
    rr = e.import_region(peer, r.descriptor)
    group = e.group([peer])
    exp = e.expect_imm(3, 100)  # never satisfied
    late = []
    exp.add_done_callback(late.append)
    threads = [t for t in threading.enumerate() if f"{e.id:x}" in t.name]
    assert threads and all(t.is_alive() for t in threads)
    assert e.region_count == 1 and e.remote_region_count == 1
    e.close()
    e.close()  # idempotent
    assert e.closed and e.stopped and r.closed and rr.closed
    assert not any(t.is_alive() for t in threads)
    with pytest.raises(xfer.Cancelled):
        exp.result(1)
    assert late == [exp]
    assert e.region_count == 0 and e.remote_region_count == 0
    # A closed engine says so, whatever the call and whatever state the
    # objects handed to it are in (its regions were closed along with it).
    calls = {
        "write_imm": lambda: e.write_imm(peer, 1),
        "expect_imm": lambda: e.expect_imm(1, 1),
        "register": lambda: e.register(bytearray(8)),
        "add_peer": lambda: e.add_peer(e.address),
        "send": lambda: e.send(peer, b"x"),
        "write": lambda: e.write(r, rr, 8),
        "write imm-only": lambda: e.write(None, rr, 0, imm=1),
        "write_paged": lambda: e.write_paged(r, rr, [0], [0], 8),
        "import_region": lambda: e.import_region(peer, r.descriptor),
        "cancel": lambda: e.cancel(5),
        "imm_disarm": lambda: e.imm_disarm(3),
        "revoke": lambda: r.revoke(),
        "group": lambda: e.group([peer]),
        "scatter": lambda: e.scatter(group, None, [(0, rr, 0)]),
        "barrier": lambda: group.barrier(1),
        "recv": lambda: e.recv(timeout=0.01),
    }
    for name, call in calls.items():
        with pytest.raises(xfer.Shutdown):
            call()
            pytest.fail(f"{name} did not raise Shutdown")
    assert e.pending_count == 0
    r.close()  # after the engine: a no-op
    group.close()  # frees the group: nothing holds it any more
    assert group.closed
    assert peer.state in ("live", "dead")  # still readable (stopping says BYE to peers: itself here)


def test_closed_region_on_a_live_engine_is_invalid(two: Two) -> None:
    """A region closed on its own (the engine lives on) is an InvalidArgument,
    and a closed source is never taken for "no source" (an immediate-only write)."""
    a, b = two.a, two.b
    target = np.zeros(64, np.uint8)
    rb = b.register(target)
    dst = a.import_region(two.pa, rb.descriptor)
    src = a.register(np.full(64, 5, np.uint8))
    src.close()
    for kw in (dict(nbytes=8), dict(nbytes=0, imm=4), dict()):
        with pytest.raises(xfer.InvalidArgument, match="source region is closed"):
            a.write(src, dst, **kw)
    with pytest.raises(xfer.InvalidArgument, match="source region is closed"):
        a.write_paged(src, dst, [0], [0], 8)
    dst.close()
    with pytest.raises(xfer.InvalidArgument, match="destination region is closed"):
        a.write(two.src, dst, 8)
    with pytest.raises(xfer.InvalidArgument, match="destination region is closed"):
        a.write(None, dst, 0, imm=4)
    with pytest.raises(xfer.InvalidArgument, match="closed"):
        src.revoke()
    assert a.pending_count == 0 and not target.any()
    assert b.imm_disarm(4) == 0  # no immediate went out either
    rb.close()


def test_stop_completes_everything_and_keeps_objects() -> None:
    a = make_engine(LOCAL_PROVIDER)
    b = make_engine(LOCAL_PROVIDER)
    try:
        peer = a.add_peer(b.address)
        b.add_peer(a.address)
        target = np.zeros(1 << 20, np.uint8)
        rb = b.register(target)  # kept: a collected region deregisters itself
        dst = a.import_region(peer, rb.descriptor)
        src = a.register(np.ones(1 << 20, np.uint8))
        group = a.group([peer])
        never = a.expect_imm(9, 1)
        a.write(src, dst).result(10)
        assert target.all()  # the path works
        target[:] = 0
        ops = [a.write(src, dst) for _ in range(20)] + [never]
        seen = []
        for op in ops:
            op.add_done_callback(seen.append)
        a.stop()
        assert a.stopped and not a.closed
        # Every completion is done once stop returns: finished, or cut short.
        assert all(op.done() for op in ops) and sorted(map(id, seen)) == sorted(map(id, ops))
        assert isinstance(never.exception(0), xfer.Cancelled)
        assert all(op.res in (0, -errno.ECANCELED) for op in ops)
        landed = target.any()
        assert landed or not any(op.res == 0 for op in ops[:-1])  # a write that succeeded landed
        st = a.stats()
        assert st.ops_completed == st.ops_submitted and a._core.strays == 0
        with pytest.raises(xfer.Shutdown):
            a.write(src, dst)
        with pytest.raises(xfer.Shutdown):
            a.write_imm(peer, 1)
        with pytest.raises(xfer.Shutdown):
            a.register(bytearray(8))
        with pytest.raises(xfer.Shutdown):
            src.revoke()
        assert peer.state == "live" and "stopped" in repr(a)
        src.close()  # regions and groups can still be released
        group.close()
        assert src.closed and a.region_count == 0
        a.stop()  # idempotent
    finally:
        a.close()
        b.close()
    assert a.closed


def test_max_regions_is_enforced() -> None:
    with make_engine(LOCAL_PROVIDER, max_regions=3) as e:
        bufs = [bytearray(4096) for _ in range(4)]
        regions = [e.register(b) for b in bufs[:3]]
        with pytest.raises(xfer.NoSpace) as ei:
            e.register(bufs[3])
        assert ei.value.errno == errno.ENOSPC and ei.value.op == "xfer_mr_reg"
        assert e.region_count == 3
        regions[0].close()
        extra = e.register(bufs[3])  # a slot came free
        assert e.region_count == 3 and not extra.closed
    with pytest.raises(xfer.InvalidArgument):
        xfer.Engine(provider=LOCAL_PROVIDER, nics="lo", max_regions=0)


def test_trace_records_each_operation(two: Two) -> None:
    a = two.a
    a.read_traces()  # whatever an earlier test left
    a.trace(True)
    try:
        t0 = time.monotonic_ns()
        ops = [a.write(two.src, two.dst, 512, dst_offset=512 * i) for i in range(5)]
        ops.append(a.write_paged(two.src, two.dst, [0, 1, 2], [2, 1, 0], 256))
        xfer.wait(ops, timeout=10)
        t1 = time.monotonic_ns()
    finally:
        a.trace(False)
    recs = {t.user_data: t for t in a.read_traces()}
    assert set(recs) >= {op.user_data for op in ops}
    for op in ops:
        t = recs[op.user_data]
        assert t.kind == op.kind and t.wrs == (3 if op.kind == xfer.OP_PAGED else 1)
        assert t0 <= t.t_call <= t.t_enq <= t.t_deq <= t.t_first <= t.t_first_ret <= t.t_last <= t.t_done <= t1
    a.write(two.src, two.dst, 8).result(10)
    assert a.read_traces() == []  # off: nothing recorded


def test_dropped_engine_is_finalized() -> None:
    e = make_engine(LOCAL_PROVIDER)
    name = f"{e.id:x}"
    threads = [t for t in threading.enumerate() if name in t.name]
    assert threads
    del e
    gc.collect()
    assert wait_until(lambda: not any(t.is_alive() for t in threads), 5)


def test_callback_exceptions_are_logged_not_raised(two: Two, caplog) -> None:
    hits = []

    def bad(c):
        hits.append(c)
        raise RuntimeError("boom")

    c = two.a.write(two.src, two.dst, 16, callback=bad)
    assert c.result(10) == 0
    assert wait_until(lambda: hits == [c], 5)
    assert wait_until(lambda: any("boom" in r.getMessage() or "boom" in str(r.exc_info) for r in caplog.records), 5)


def test_revoked_region_refuses_remote_writes() -> None:
    a = make_engine(LOCAL_PROVIDER)
    b = make_engine(LOCAL_PROVIDER)
    try:
        peer = a.add_peer(b.address)
        b.add_peer(a.address)
        target = np.zeros(4096, np.uint8)
        rb = b.register(target)
        dst = a.import_region(peer, rb.descriptor)
        src = a.register(np.full(4096, 7, np.uint8))
        a.write(src, dst, 4096).result(10)
        assert (target == 7).all()
        target[:] = 0
        assert not rb.revoked
        rb.revoke()
        rb.revoke()  # idempotent
        assert rb.revoked and not rb.closed and "revoked" in repr(rb)
        with pytest.raises(xfer.Error):  # the provider's error: ECANCELED on tcp
            a.write(src, dst, 4096, timeout_ms=5000).result(10)
        assert not target.any()
        assert peer.state == "live"  # a refused write is not a dead peer
        # The revoked region cannot be used locally either.
        back = b.import_region(b.add_peer(a.address), src.descriptor)
        with pytest.raises(xfer.InvalidArgument, match="revoked"):
            b.write(rb, back, 8)
        a.write(src, dst, 0, imm=1, timeout_ms=5000).exception(10)  # no crash on a dead key either
        rb.close()
        assert rb.closed
    finally:
        a.close()
        b.close()


def test_peer_down_without_a_progress_thread() -> None:
    """on_peer_down is called from progress() when there is no reaper thread,
    once, after the operations to the dead peer have completed; the C worker
    only runs libxfer's xfer_peer_down_notify_fd (it never calls into Python)."""
    import ctypes

    downs = []
    a = make_engine(
        LOCAL_PROVIDER, heartbeat_ms=100, heartbeat_misses=10, progress_thread=False,
        on_peer_down=lambda p, err: downs.append((p, err, threading.current_thread())),
    )
    notify = ctypes.cast(ctypes.CDLL(xfer.LIBRARY_PATH).xfer_peer_down_notify_fd, ctypes.c_void_p).value
    assert a._core.down_signal is not None and a._core.down_signal.callback == notify
    b = make_engine(LOCAL_PROVIDER)
    try:
        peer = a.add_peer(b.address)
        b.add_peer(a.address)
        a.write_imm(peer, 1).result(10)
        time.sleep(0.3)  # PING/PONG rounds
        b.close()  # the peer goes away
        pending = a.expect_imm(77, 1, timeout_ms=10000)  # unrelated: stays pending
        t0 = time.monotonic()
        while not downs and time.monotonic() - t0 < 4:
            a.progress(0.05)
        assert downs, f"no on_peer_down within 4 s (peer state {peer.state})"
        who, err, thread = downs[0]
        assert who is peer and isinstance(err, xfer.PeerError) and thread is threading.current_thread()
        assert peer.state == "dead"
        with pytest.raises(xfer.PeerError):
            a.write_imm(peer, 2)
        for _ in range(5):
            a.progress(0.02)
        assert len(downs) == 1 and not pending.done()
    finally:
        a.close()
        b.close()
    assert isinstance(pending.exception(0), xfer.Cancelled)


def test_cancelled_scatter_statuses() -> None:
    """A scatter cancelled before its entries were posted: the entries that
    never went out must not report success."""
    a = make_engine(LOCAL_PROVIDER)
    b = make_engine(LOCAL_PROVIDER)
    try:
        peer = a.add_peer(b.address)
        b.add_peer(a.address)
        n = 4000
        target = np.zeros(n * 8, np.uint8)
        rb = b.register(target)  # kept: a collected region deregisters itself
        dst = a.import_region(peer, rb.descriptor)
        src = a.register(np.ones(64, np.uint8))
        a.write(src, dst, 8).result(10)  # the connection is up
        target[:] = 0
        with a.group([peer]) as g:
            sc = g.scatter(src, [(0, dst, 8, 0, i * 8) for i in range(n)], tag=77)
            cut = a.cancel(77).result(10)
            err = sc.exception(10)
            time.sleep(0.05)
            landed = target.reshape(n, 8).all(axis=1)
            st = np.array(sc.statuses)
            assert cut in (0, 1) and (err is None) == (cut == 0 and not st.any())
            # Cancelled, or the first entry's own error (a loaded machine can
            # see the provider fail an entry first).
            assert err is None or isinstance(err, (xfer.Cancelled, xfer.PeerConnectionError)), err
            assert not (landed & (st != 0)).any()  # what landed reports success
            lying = int(((st == 0) & ~landed).sum())
            if lying:
                pytest.xfail(
                    f"libxfer gap: {lying} of {n} scatter entries that were cut short (never posted) report "
                    "status 0; xfer_scatter leaves the status of unposted entries at the 0 it wrote at submission"
                )
    finally:
        a.close()
        b.close()
