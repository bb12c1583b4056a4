"""xfer.Watcher in one process: host-side bumps call back with the right
(old, new), callbacks submit writes, exceptions in callbacks are kept (never
crash the process), close under load, close from inside the callback, and no
leak of threads or memory over many watchers. The CUDA tests at the end run
on a GPU machine (skipped here with the reason); two processes: test_pair.py."""
from __future__ import annotations

import gc
import logging
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import List, Tuple

import numpy as np
import pytest

import xfer
from xfer import _lib, _watcher
from conftest import make_engine
from remote import wait_until

pytestmark = pytest.mark.local


def threads_now() -> int:
    """OS threads of this process: a C watcher thread is no Python thread."""
    return len(os.listdir("/proc/self/task"))


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class Recorder:
    def __init__(self) -> None:
        self.pairs: List[Tuple[int, int]] = []
        self.threads: set = set()

    def __call__(self, old: int, new: int) -> None:
        self.threads.add(threading.get_ident())
        self.pairs.append((old, new))

    def last(self) -> int:
        return self.pairs[-1][1] if self.pairs else 0


def test_host_bumps_call_back_with_old_and_new() -> None:
    rec = Recorder()
    with xfer.Watcher(rec, spin_us=200) as w:
        assert w.value == 0 and w.word != 0 and not w.closed
        if not xfer.cuda_available():
            # No CUDA: plain host memory, no device address.
            assert w.device_ptr == 0 and not w.mapped
        for v in range(1, 201):
            w.set(v)
            assert wait_until(lambda: rec.last() == v, 5, 0.0001), f"no callback for {v}: {rec.pairs[-3:]}"
            if v % 50 == 0:
                time.sleep(0.005)  # the thread backs off to sleeping; a change must still wake it
        assert rec.pairs == [(v - 1, v) for v in range(1, 201)]
        # Changes between two polls are coalesced: a jump is one call.
        w.set(1000)
        assert wait_until(lambda: rec.last() == 1000, 5, 0.0001)
        assert rec.pairs[-1] == (200, 1000)
        assert w.bump() == 1001 and w.bump(9) == 1010
        assert wait_until(lambda: rec.last() == 1010, 5, 0.0001)
        # Going backwards (a reset) is a change too.
        w.set(0)
        assert wait_until(lambda: rec.pairs[-1] == (1010, 0), 5, 0.0001)
        assert w.calls == len(rec.pairs)
        assert len(rec.threads) == 1 and threading.get_ident() not in rec.threads
    assert w.closed
    with pytest.raises(xfer.InvalidArgument):
        w.set(1)
    w.close()  # idempotent


def test_a_bump_before_the_first_poll_is_reported_from_zero() -> None:
    rec = Recorder()
    with xfer.Watcher(rec) as w:
        w.set(5)
        assert wait_until(lambda: rec.pairs, 5, 0.0001)
        assert rec.pairs == [(0, 5)]


def test_bad_arguments() -> None:
    with pytest.raises(xfer.InvalidArgument):
        xfer.Watcher(42)  # type: ignore[arg-type]
    for bad in (-1, 2**32, 1.5, True):
        with pytest.raises(xfer.InvalidArgument):
            xfer.Watcher(lambda o, n: None, spin_us=bad)  # type: ignore[arg-type]
    with xfer.Watcher(lambda o, n: None) as w:
        for v in (-1, 2**64, "1"):
            with pytest.raises(xfer.InvalidArgument):
                w.set(v)  # type: ignore[arg-type]


def test_exceptions_in_the_callback_are_kept_and_raised_at_close(caplog) -> None:
    rec = Recorder()

    def cb(old: int, new: int) -> None:
        rec(old, new)
        if new in (2, 4):
            raise ValueError(f"layer {new} failed")

    with caplog.at_level(logging.ERROR, logger="xfer"):
        w = xfer.Watcher(cb)
        for v in range(1, 6):
            w.set(v)
            assert wait_until(lambda: rec.last() == v, 5, 0.0001)
        # The process and the watcher live on; later callbacks still run.
        assert rec.pairs == [(v - 1, v) for v in range(1, 6)]
        assert w.error_count == 2 and [str(e) for e in w.errors] == ["layer 2 failed", "layer 4 failed"]
        with pytest.raises(ValueError, match="layer 2 failed") as ei:
            w.close()
        assert any("2 exceptions" in n for n in getattr(ei.value, "__notes__", [])) or not hasattr(ei.value, "add_note")
        w.close()  # raised once
    assert sum("exception in watcher callback" in r.getMessage() for r in caplog.records) == 2

    # As a context manager: raised on leaving the block...
    with pytest.raises(ValueError, match="layer 2"):
        with xfer.Watcher(cb) as w2:
            w2.set(2)
            assert wait_until(lambda: w2.error_count == 1, 5, 0.0001)
    # ...unless the block itself raised: that exception is not masked.
    with pytest.raises(KeyError):
        with xfer.Watcher(cb) as w3:
            w3.set(4)
            assert wait_until(lambda: w3.error_count == 1, 5, 0.0001)
            raise KeyError("body")
    assert w3.closed and len(w3.errors) == 1


def test_base_exceptions_do_not_escape_into_c() -> None:
    def cb(old: int, new: int) -> None:
        raise SystemExit(3)

    w = xfer.Watcher(cb)
    w.set(1)
    assert wait_until(lambda: w.error_count == 1, 5, 0.0001)
    with pytest.raises(SystemExit):
        w.close()


def test_close_from_inside_the_callback() -> None:
    before = threads_now()
    calls: List[int] = []
    holder: List[xfer.Watcher] = []

    def cb(old: int, new: int) -> None:
        calls.append(new)
        if new == 3:
            holder[0].close()  # a thread cannot join itself: a helper does

    w = xfer.Watcher(cb, spin_us=100)
    holder.append(w)
    for v in (1, 2, 3):
        w.set(v)
        assert wait_until(lambda: calls and calls[-1] == v, 5, 0.0001)
    assert w.closed
    with pytest.raises(xfer.InvalidArgument):
        w.set(4)
    assert wait_until(lambda: threads_now() <= before, 5), "the watcher thread was never joined"
    assert calls == [1, 2, 3]


def test_callback_submits_writes_to_a_peer() -> None:
    """The production pattern: a producer announces layer after layer on the
    word; the callback submits that layer's paged write (one process, two
    engines)."""
    layers, pages, page = 12, 8, 1024
    with make_engine("tcp") as a, make_engine("tcp") as b:
        peer = a.add_peer(b.address)
        b.add_peer(a.address)
        kv = np.random.default_rng(1).integers(0, 256, (layers, pages, page), dtype=np.uint8)
        dst_arr = np.zeros_like(kv)
        src = a.register(kv)
        dst_region = b.register(dst_arr)  # referenced: a collected region deregisters
        dst = a.import_region(peer, dst_region.descriptor)
        arrived = b.expect_imm(31, layers * pages)
        ops: List[xfer.Completion] = []
        order = np.arange(pages, dtype=np.uint32)[::-1].copy()

        def submit(old: int, new: int) -> None:
            for layer in range(old, new):  # coalesced bumps: every layer announced since
                base = layer * pages * page
                ops.append(
                    a.write_paged(src, dst, order, order, page, src_base=base, dst_base=base, imm=31)
                )

        with xfer.Watcher(submit) as w:
            for layer in range(1, layers + 1):
                w.set(layer)
                time.sleep(0.001 * (layer % 3))  # sometimes coalesced, sometimes not
            arrived.result(30)
            assert w.error_count == 0
        xfer.wait(ops, 30)
        assert len(ops) == layers and 1 <= w.calls <= layers
        assert np.array_equal(dst_arr, kv)


def test_clean_close_under_load() -> None:
    """A producer bumps as fast as it can while the callback submits writes;
    close() mid-stream returns once the thread is joined, after which no
    callback runs and the producer's bumps fail cleanly, and every write it
    submitted completes."""
    before = threads_now()
    with make_engine("tcp") as a, make_engine("tcp") as b:
        peer = a.add_peer(b.address)
        b.add_peer(a.address)
        src = a.register(np.arange(4096, dtype=np.uint8))
        dst_arr = np.zeros(4096, np.uint8)
        dst_region = b.register(dst_arr)  # referenced: a collected region deregisters
        dst = a.import_region(peer, dst_region.descriptor)
        ops: List[xfer.Completion] = []
        lock = threading.Lock()

        def cb(old: int, new: int) -> None:
            with lock:
                try:
                    ops.append(a.write(src, dst, 64, dst_offset=(new % 64) * 64))
                except xfer.WouldBlock:
                    pass  # the submission queue is full: a real producer would retry

        # Many rounds: a producer storing into the word after close() freed
        # it corrupts the heap (seen as an abort in malloc, under ASan as a
        # use after free), and the race needs repetitions to show.
        for round_ in range(20):
            w = xfer.Watcher(cb, spin_us=50)
            stop = threading.Event()

            def produce() -> None:
                try:
                    while not stop.is_set():
                        w.bump()
                except xfer.InvalidArgument:
                    pass  # closed under our feet: that is the point

            t = threading.Thread(target=produce)
            t.start()
            assert wait_until(lambda: w.calls > 20, 10), "no callbacks under load"
            w.close()
            calls = w.calls
            stop.set()
            t.join()
            time.sleep(0.02)
            assert w.calls == calls, "a callback ran after close() returned"
        with lock:
            xfer.wait(ops, 30)
        assert ops and all(o.res == 0 for o in ops)
    assert wait_until(lambda: threads_now() <= before, 5), f"{threads_now() - before} threads left"


def test_close_waits_for_a_host_store_in_progress(monkeypatch) -> None:
    """close() frees the word: a set() on another thread that has passed its
    "still open?" check must finish its store first. The store is slowed
    down to make the window wide; destroy is recorded as it starts."""
    events: List[str] = []
    w = xfer.Watcher(lambda o, n: None)
    real = w._word

    class SlowWord:
        @property
        def value(self) -> int:
            return real.value

        @value.setter
        def value(self, v: int) -> None:
            events.append("store begins")
            time.sleep(0.05)
            real.value = v
            events.append("store ends")

    destroy = _lib.xfer_watcher_destroy

    def recorded_destroy(h: int) -> None:
        events.append("destroy")
        destroy(h)

    monkeypatch.setattr(_lib, "xfer_watcher_destroy", recorded_destroy)
    w._word = SlowWord()  # type: ignore[assignment]
    t = threading.Thread(target=w.set, args=(5,))
    t.start()
    assert wait_until(lambda: events, 5, 0.0001)
    w.close()
    t.join()
    assert events == ["store begins", "store ends", "destroy"]


def test_no_leak_over_many_watchers() -> None:
    rec_calls = [0]

    def cb(old: int, new: int) -> None:
        rec_calls[0] += 1

    def cycle(i: int) -> None:
        if i % 3 == 2:
            w = xfer.Watcher(cb, spin_us=10)
            w.set(1)
            del w  # collected without close(): destroyed on a helper thread
        else:
            with xfer.Watcher(cb, spin_us=10) as w:
                w.set(i + 1)
                if i % 3 == 1:
                    wait_until(lambda: w.calls == 1, 5, 0.0001)

    for i in range(300):  # warm-up
        cycle(i)
    gc.collect()
    assert wait_until(lambda: not _watcher._helpers and not _watcher._live, 10)
    threads, base = threads_now(), rss_bytes()
    for i in range(3000):
        cycle(i)
    gc.collect()
    assert wait_until(lambda: not _watcher._helpers and not _watcher._live, 10), "watchers never destroyed"
    assert wait_until(lambda: threads_now() <= threads, 5), f"{threads_now() - threads} threads left over"
    grown = rss_bytes() - base
    assert rec_calls[0] >= 1000
    # 3,000 leaked watchers would hold 3,000 thread stacks (8 MiB of address
    # space each, some of it touched) and their callbacks' objects.
    assert grown < 4 * 1024 * 1024, f"RSS grew by {grown / 1024:.0f} KiB over 3,000 watchers"


def test_interpreter_exit_with_watchers_still_running() -> None:
    """Watchers left open — one bumped nonstop by a daemon thread while its
    callback submits writes — are destroyed at exit, before the engines
    close: the process exits 0, without a hang or a crash."""
    script = textwrap.dedent(
        """
        import threading, numpy as np, xfer
        a = xfer.Engine(provider="tcp", nics="lo")
        b = xfer.Engine(provider="tcp", nics="lo")
        peer = a.add_peer(b.address); b.add_peer(a.address)
        src = a.register(np.zeros(4096, np.uint8))
        keep = b.register(np.zeros(4096, np.uint8))
        dst = a.import_region(peer, keep.descriptor)
        ops = []
        def cb(old, new):
            ops.append(a.write(src, dst, 64))
        w = xfer.Watcher(cb, spin_us=10)
        idle = xfer.Watcher(lambda o, n: None)
        def produce():
            while True:
                try:
                    w.bump()
                except xfer.InvalidArgument:
                    return
        threading.Thread(target=produce, daemon=True).start()
        while w.calls < 50:
            pass
        print("exiting", flush=True)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(Path(xfer.__file__).resolve().parent.parent)}
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "exiting" in r.stdout
    assert "Fatal Python error" not in r.stderr and "Traceback" not in r.stderr, r.stderr[-3000:]


def test_close_with_a_live_view_defers_the_free(monkeypatch) -> None:
    """The word must outlive any CUDA view a kernel may store through. Without
    a GPU the view is faked; what is tested is the bookkeeping: close() stops
    the callbacks at once and the C watcher goes with the last view."""

    class FakeView:
        pass

    def fake_tensor(ptr: int, count: int, owner: object, what: str, device: object = None):
        v = FakeView()
        v.owner = owner  # type: ignore[attr-defined]
        return v, v

    destroyed: List[int] = []
    destroy = _lib.xfer_watcher_destroy

    def recorded_destroy(h: int) -> None:
        destroyed.append(h)
        destroy(h)

    monkeypatch.setattr(_watcher, "cuda_tensor", fake_tensor)
    monkeypatch.setattr(_lib, "xfer_watcher_destroy", recorded_destroy)
    rec = Recorder()
    w = xfer.Watcher(rec, spin_us=10)
    w.device_ptr = w.word  # as if mapped
    view = w.tensor()
    w.set(1)
    assert wait_until(lambda: rec.pairs == [(0, 1)], 5, 0.0001)
    w.close()
    assert w.closed
    w._word.value = 2  # what a kernel could still do: the word is still there
    time.sleep(0.01)
    assert rec.pairs == [(0, 1)], "a callback ran after close()"
    assert not destroyed, "the word was freed while a view of it lives"
    del view
    gc.collect()
    assert wait_until(lambda: len(destroyed) == 1, 5), "the watcher outlived its last view"


# -------------------------------------------------------------------- CUDA


def _torch_cuda():
    try:
        import torch
    except Exception as ex:  # noqa: BLE001 - ImportError, or a broken install
        pytest.skip(f"torch is not importable ({ex}): the CUDA watcher tests need torch with CUDA")
    if not torch.cuda.is_available():
        pytest.skip("CUDA is not available here (torch.cuda.is_available() is False)")
    if not xfer.cuda_available():
        pytest.skip("libxfer finds no usable CUDA driver (xfer.cuda_available() is False)")
    return torch


def test_cuda_graph_bumps_the_word() -> None:
    """A torch op captured in a CUDA graph bumps the mapped word; every
    replay reaches the callback (coalesced or not), in order."""
    torch = _torch_cuda()
    rec = Recorder()
    with xfer.Watcher(rec, spin_us=1000) as w:
        assert w.mapped and w.device_ptr != 0
        word = w.tensor()
        assert word.dtype == torch.int64 and word.shape == (1,) and word.data_ptr() == w.device_ptr
        assert word.device == torch.device("cuda", torch.cuda.current_device())
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            word.add_(1)  # eager, on the side stream: also warms up the op
        stream.synchronize()
        assert wait_until(lambda: rec.last() == 1, 5, 0.0001)
        graph = torch.cuda.CUDAGraph()
        # thread_local: CUDA calls of other threads (libxfer's) cannot void the capture.
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            word.add_(1)
        assert w.value == 1  # capturing runs nothing
        replays = 500
        for i in range(replays):
            graph.replay()
            if i % 50 == 0:
                torch.cuda.synchronize()
        torch.cuda.synchronize()
        assert wait_until(lambda: rec.last() == 1 + replays, 10, 0.0001), rec.pairs[-3:]
        assert all(o < n for o, n in rec.pairs) and all(a[1] == b[0] for a, b in zip(rec.pairs, rec.pairs[1:]))
        assert w.value == 1 + replays and int(word.item()) == 1 + replays
        del graph, word


def test_cuda_graph_bump_triggers_a_write() -> None:
    """The whole pattern on a GPU: a captured op fills a layer on the GPU and
    bumps the word; the callback writes that layer to a peer."""
    torch = _torch_cuda()
    layers, n = 4, 4096
    with make_engine("tcp") as a, make_engine("tcp") as b:
        peer = a.add_peer(b.address)
        b.add_peer(a.address)
        kv = torch.zeros((layers, n), dtype=torch.uint8, device="cuda")
        src = a.register(kv)
        dst_arr = np.zeros((layers, n), np.uint8)
        dst_region = b.register(dst_arr)  # referenced: a collected region deregisters
        dst = a.import_region(peer, dst_region.descriptor)
        arrived = b.expect_imm(41, layers)
        ops: List[xfer.Completion] = []

        def cb(old: int, new: int) -> None:
            for layer in range(old, new):
                ops.append(a.write(src, dst, n, src_offset=layer * n, dst_offset=layer * n, imm=41))

        with xfer.Watcher(cb) as w:
            word = w.tensor()
            layer = torch.zeros((), dtype=torch.int64, device="cuda")
            rows = torch.arange(layers, device="cuda").unsqueeze(1)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                kv.add_((rows == layer).to(torch.uint8) * 7)  # "compute" the layer
                layer.add_(1)
                word.add_(1)  # announce it, in stream order after the data
            for i in range(layers):
                graph.replay()
                # The next replay rewrites the whole tensor: let this layer's
                # write, which reads it, finish first.
                assert wait_until(lambda: len(ops) == i + 1, 10), f"no callback for layer {i}"
                ops[-1].result(30)
            torch.cuda.synchronize()
            arrived.result(30)
            assert w.error_count == 0
            del graph, word
        assert (dst_arr == 7).all()


def test_pinned_signal_is_visible_to_the_gpu() -> None:
    torch = _torch_cuda()
    with make_engine("tcp") as a, make_engine("tcp") as b:
        peer = a.add_peer(b.address)
        b.add_peer(a.address)
        sig = xfer.Signal.pinned()
        assert sig.mapped and sig.device_ptr == sig.address
        t = sig.tensor()
        assert t.is_cuda and int(t.item()) == 0
        c = b.expect_imm(51, 3, signal=(sig, 0xABC))
        for _ in range(3):
            a.write_imm(peer, 51).result(10)
        assert sig.wait(0xABC, 10) == 0xABC
        c.result(10)
        # A kernel reads what the worker stored (the host-mapped word, on the GPU).
        assert int((t + 1).item()) == 0xABC + 1
