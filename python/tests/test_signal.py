"""Completion signal words (``signal=(target, value)``) in one process: every
operation kind stores its value, failures store it too, the word is kept
alive until the store and released after it, and a signal never leaks into
the next submission. Two processes: test_pair.py; GPU: test_watcher.py."""
from __future__ import annotations

import ctypes
import errno
import gc
import weakref

import numpy as np
import pytest

import xfer
from conftest import PROVIDERS, make_engine

pytestmark = pytest.mark.local


class Two:
    """Two engines of one provider in this process, each a peer of the other."""

    def __init__(self, provider: str) -> None:
        self.a = make_engine(provider)
        self.b = make_engine(provider)
        self.pa = self.a.add_peer(self.b.address)
        self.pb = self.b.add_peer(self.a.address)
        self.src_arr = np.arange(64 * 1024, dtype=np.uint8)
        self.dst_arr = np.zeros(64 * 1024, np.uint8)
        self.src = self.a.register(self.src_arr)
        self.dst_region = self.b.register(self.dst_arr)
        self.dst = self.a.import_region(self.pa, self.dst_region.descriptor)

    def close(self) -> None:
        self.a.close()
        self.b.close()


@pytest.fixture(scope="module", params=PROVIDERS)
def two(request):
    t = Two(request.param)
    yield t
    t.close()


# ------------------------------------------------------------- the object


def test_signal_words_and_their_memory() -> None:
    s = xfer.Signal()
    assert s.value == 0 and int(s) == 0 and s.address % 64 == 0 and not s.mapped and s.device_ptr == 0
    s.set(2**64 - 1)
    assert s.value == 2**64 - 1
    s.reset()
    assert s.value == 0

    arr = np.zeros(4, np.uint64)
    s2 = xfer.Signal(arr, 2)
    assert s2.address == arr.ctypes.data + 16
    arr[2] = 41
    assert s2.value == 41
    s2.set(42)
    assert arr[2] == 42 and arr[[0, 1, 3]].sum() == 0

    raw = (ctypes.c_uint64 * 2)()
    s3 = xfer.Signal(ctypes.addressof(raw), 1)
    s3.set(7)
    assert raw[1] == 7 and raw[0] == 0

    bad = [
        (np.zeros(1, np.uint64)[:0],),  # empty
        (np.zeros(2, np.uint64), 2),  # past the end
        (np.zeros(9, np.uint8)[1:],),  # misaligned
        (np.zeros(1, np.uint64).view(np.uint8)[::2],),  # not contiguous
        (bytes(8),),  # read-only
        (0,),
        (xfer.Signal(), 1),  # a Signal is not memory
        (None, 1),
        (arr, -1),
    ]
    for args in bad:
        with pytest.raises(xfer.InvalidArgument):
            xfer.Signal(*args)  # type: ignore[arg-type]
    for v in (-1, 2**64, 1.5, "1"):
        with pytest.raises(xfer.InvalidArgument):
            s.set(v)  # type: ignore[arg-type]
    with pytest.raises(xfer.InvalidArgument):
        s.tensor()  # pageable memory: no GPU may read it
    with xfer.Watcher(lambda o, n: None) as w:
        with pytest.raises(xfer.InvalidArgument, match="Watcher"):
            xfer.Signal(w)


def test_signal_wait() -> None:
    s = xfer.Signal()
    with pytest.raises(xfer.TimeoutError) as ei:
        s.wait(1, timeout=0.02)
    assert isinstance(ei.value, TimeoutError) and ei.value.errno == errno.ETIMEDOUT
    s.set(5)
    assert s.wait(3, timeout=0) == 5  # reached: ">=" by default
    with pytest.raises(xfer.TimeoutError):
        s.wait(3, timeout=0.01, exact=True)
    assert s.wait(5, timeout=0, exact=True) == 5


# ------------------------------------------------------- every operation


def _ops(t: Two, group: xfer.Group):
    """(name, submit(sig, v)) for every operation that takes a completion."""

    def expect(sig: xfer.Signal, v: int) -> xfer.Completion:
        c = t.b.expect_imm(900 + v, 2, signal=(sig, v))
        assert not c.done() and sig.value == 0
        t.a.write_imm(t.pa, 900 + v).result(10)
        t.a.write_imm(t.pa, 900 + v).result(10)
        return c

    return [
        ("write", lambda sig, v: t.a.write(t.src, t.dst, 4096, signal=(sig, v))),
        ("write_paged", lambda sig, v: t.a.write_paged(t.src, t.dst, [3, 1], [0, 2], 1024, signal=(sig, v))),
        ("write_imm", lambda sig, v: t.a.write_imm(t.pa, 77, signal=(sig, v))),
        ("send", lambda sig, v: t.a.send(t.pa, b"signal", signal=(sig, v))),
        ("scatter", lambda sig, v: t.a.scatter(group, t.src, [(0, t.dst, 512, 0, 8192)], signal=(sig, v))),
        ("barrier", lambda sig, v: group.barrier(78, signal=(sig, v))),
        ("expect_imm", expect),
        ("cancel", lambda sig, v: t.a.cancel(12345, signal=(sig, v))),
    ]


def test_every_operation_stores_its_signal(two: Two) -> None:
    sig = xfer.Signal()
    with two.a.group([two.pa]) as group:
        for i, (name, submit) in enumerate(_ops(two, group)):
            v = 1000 + i
            sig.set(0)
            c = submit(sig, v)
            assert c.result(10) >= 0, name
            # Stored before the completion was delivered: already there.
            assert sig.value == v, f"{name}: signal word {sig.value}, expected {v}"
    assert two.b.recv(timeout=10).data == b"signal"
    assert two.dst_arr[:4096].tobytes() == two.src_arr[:4096].tobytes()


def test_signal_targets_other_than_signal_objects(two: Two) -> None:
    arr = np.zeros(3, np.uint64)
    two.a.write(two.src, two.dst, 64, signal=(arr[1:2], 9)).result(10)
    raw = (ctypes.c_uint64 * 1)()
    two.a.write_imm(two.pa, 5, signal=(ctypes.addressof(raw), 2**64 - 1)).result(10)
    assert arr.tolist() == [0, 9, 0] and raw[0] == 2**64 - 1
    for bad in [7, (xfer.Signal(),), (xfer.Signal(), -1), (xfer.Signal(), 2**64), (bytes(8), 1), (None, 1)]:
        with pytest.raises(xfer.InvalidArgument):
            two.a.write(two.src, two.dst, 64, signal=bad)  # type: ignore[arg-type]
    assert two.a.pending_count == 0


def test_failed_operations_store_the_signal_too(two: Two) -> None:
    """The word means "finished"; the Completion says how."""
    sig = xfer.Signal()
    c = two.b.expect_imm(4242, 1, timeout_ms=50, signal=(sig, 3))
    with pytest.raises(xfer.TimeoutError):
        c.result(10)
    assert sig.value == 3
    c = two.b.expect_imm(4243, 1, signal=(sig, 4))
    assert two.b.imm_disarm(4243) == 0
    with pytest.raises(xfer.Cancelled):
        c.result(10)
    assert sig.value == 4
    # Refused at once (already armed): stored all the same, like every completion.
    armed = two.b.expect_imm(4244, 1)
    c = two.b.expect_imm(4244, 1, signal=(sig, 5))
    with pytest.raises(xfer.Busy):
        c.result(10)
    assert sig.value == 5
    two.b.imm_disarm(4244)
    with pytest.raises(xfer.Cancelled):
        armed.result(10)


def test_a_signal_never_leaks_into_the_next_submission(two: Two) -> None:
    """Submissions share a per-thread buffer: the next one must not inherit
    the previous one's signal word."""
    sig = xfer.Signal()
    two.a.write(two.src, two.dst, 64, signal=(sig, 1)).result(10)
    assert sig.value == 1
    sig.set(0)
    two.a.write(two.src, two.dst, 64).result(10)
    two.a.write_paged(two.src, two.dst, [0], [0], 64).result(10)
    two.a.write_imm(two.pa, 1).result(10)
    two.a.cancel(99).result(10)
    assert sig.value == 0


def test_the_completion_keeps_the_word_alive_until_the_store(two: Two) -> None:
    base = np.zeros(4, np.uint64)
    view = base[2:3]  # what the Signal holds; base stays here to read the store
    ref = weakref.ref(view)
    c = two.b.expect_imm(4300, 1, signal=(view, 11))
    del view
    gc.collect()
    assert ref() is not None, "the signal's memory was dropped while the worker may still store into it"
    two.a.write_imm(two.pa, 4300).result(10)
    c.result(10)
    assert base.tolist() == [0, 0, 11, 0]
    gc.collect()
    assert ref() is None, "the signal's memory outlived its completion"


def test_signals_on_a_stopped_engine_raise_shutdown(provider: str) -> None:
    e = make_engine(provider)
    peer = e.add_peer(e.address)
    e.stop()
    with pytest.raises(xfer.Shutdown):
        e.write_imm(peer, 1, signal=(xfer.Signal(), 1))
    e.close()


def test_signal_pinned_without_cuda() -> None:
    try:
        s = xfer.Signal.pinned()
    except (xfer.NoGPU, xfer.NotSupported) as ex:
        assert not xfer.cuda_available() or isinstance(ex, xfer.NotSupported)
        return
    assert s.mapped and s.device_ptr == s.address and s.address % 64 == 0 and s.value == 0
