"""Two processes whose memory is torch CUDA tensors: every write kind, verified.

Runs once per provider and GPU path: "ipc" (same-host CUDA IPC, the
default when both sides are GPUs of one host) and "staged" (XFER_GPU_IPC=0
in both processes: through the engine's pinned host mirrors, as over a
network). The child uses the second GPU when there are two. Skips without
torch or CUDA, saying so.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

import xfer
from conftest import PROVIDERS, make_engine
from remote import _CTX, Remote

KIB = 1024


def _torch():
    try:
        import torch
    except ImportError:
        pytest.skip("torch is not installed: the CUDA pair tests need torch with CUDA")
    if not torch.cuda.is_available():
        pytest.skip("CUDA is not available here (torch.cuda.is_available() is False): GPU pair tests skipped")
    return torch


class CudaRemote(Remote):
    """remote.Remote's protocol, with a child whose regions are CUDA tensors."""

    def __init__(self, provider: str, env, device: str):
        from cuda_remote import serve

        self.provider = provider
        self.conn, child = _CTX.Pipe()
        self.proc = _CTX.Process(target=serve, args=(child, provider, env, device), daemon=True)
        self.proc.start()
        child.close()
        hello = self._recv_json(120)
        assert "error" not in hello, f"child engine failed: {hello}"
        self.id = hello["id"]
        self.address = self.conn.recv_bytes()

    def call(self, op: str, _blob=None, _timeout: float = 120, **kw):
        # GPU set-up and 64 MiB regions take longer than remote.py's 60 s allow.
        return super().call(op, _blob, _timeout, **kw)

    def region(self, name: str, nbytes: int, guard: int = 256) -> bytes:
        r = self.check("region", name=name, nbytes=nbytes, guard=guard)
        assert r["gpu"] is not None, "the child's CUDA tensor did not register as GPU memory"
        return self.blob()

    def read_array(self, name: str) -> np.ndarray:
        return np.frombuffer(self.read(name), dtype=np.uint8)


PARAMS = [(p, path) for p in PROVIDERS for path in ("ipc", "staged")]


@pytest.fixture(scope="module", params=PARAMS, ids=[f"{p}-{path}" for p, path in PARAMS])
def gpair(request):
    torch = _torch()
    provider, path = request.param
    env = {"XFER_GPU_IPC": "0" if path == "staged" else "1"}
    old = os.environ.get("XFER_GPU_IPC")
    os.environ.update(env)  # the parent engine reads it at creation too
    try:
        eng = make_engine(provider, heartbeat_ms=0)
    finally:
        if old is None:
            os.environ.pop("XFER_GPU_IPC", None)
        else:
            os.environ["XFER_GPU_IPC"] = old
    child_dev = "cuda:1" if torch.cuda.device_count() > 1 else "cuda:0"
    remote = CudaRemote(provider, env, child_dev)
    try:
        remote.conn.send_bytes(eng.address)
        peer = eng.add_peer(remote.address)
        yield torch, eng, remote, peer
    finally:
        remote.close()
        eng.close()


def rand_gpu(torch, n: int, seed: int):
    g = torch.Generator(device="cpu").manual_seed(seed)
    return torch.randint(0, 256, (n,), dtype=torch.uint8, generator=g).to("cuda:0")


def test_single_writes_with_offsets(gpair) -> None:
    torch, eng, remote, peer = gpair
    n = 4 * 1024 * KIB
    dst = eng.import_region(peer, remote.region("single", n))
    src_t = rand_gpu(torch, n, 1)
    want = np.zeros(n, np.uint8)
    host = src_t.cpu().numpy()
    with eng.register(src_t) as src:
        assert src.gpu == 0
        cases = [(0, 0, 1), (5, 4097, 4099), (n // 2, 3, 1024 * KIB + 3), (0, n - 64 * KIB, 64 * KIB)]
        remote.check("expect", key="s", imm=301, count=len(cases))
        for so, do, ln in cases:
            eng.write(src, dst, ln, src_offset=so, dst_offset=do, imm=301).result(60)
            want[do : do + ln] = host[so : so + ln]
        assert remote.check("wait", key="s")["res"] == 0
    assert np.array_equal(remote.read_array("single"), want)
    assert remote.check("disarm", imm=301)["arrived"] == 0  # each immediate exactly once


def test_whole_64mib_region(gpair) -> None:
    torch, eng, remote, peer = gpair
    n = 64 * 1024 * KIB
    dst = eng.import_region(peer, remote.region("big", n))
    src_t = rand_gpu(torch, n, 2)
    with eng.register(src_t) as src:
        remote.check("expect", key="b", imm=302, count=1)
        eng.write(src, dst, imm=302).result(120)
        assert remote.check("wait", key="b", timeout=120)["res"] == 0
    assert np.array_equal(remote.read_array("big"), src_t.cpu().numpy())


def test_paged_write_1000_pages(gpair) -> None:
    torch, eng, remote, peer = gpair
    pages, page, stride = 1000, 4 * KIB, 5 * KIB  # strided destination, gaps stay zero
    dst = eng.import_region(peer, remote.region("paged", 128 + pages * stride))
    src_t = rand_gpu(torch, pages * page, 3)
    rng = np.random.default_rng(4)
    sp = torch.from_numpy(rng.permutation(pages).astype(np.int32))  # torch CPU index tensors
    dp = torch.from_numpy(rng.permutation(pages).astype(np.int32))
    with eng.register(src_t) as src:
        remote.check("expect", key="p", imm=303, count=pages)
        eng.write_paged(src, dst, sp, dp, page, dst_stride=stride, dst_base=128, imm=303).result(120)
        assert remote.check("wait", key="p", timeout=120)["res"] == 0
    host = src_t.cpu().numpy()
    want = np.zeros(128 + pages * stride, np.uint8)
    for s, d in zip(sp.tolist(), dp.tolist()):
        want[128 + d * stride : 128 + d * stride + page] = host[s * page : (s + 1) * page]
    assert np.array_equal(remote.read_array("paged"), want)


def test_zero_length_write_and_immediate_only(gpair) -> None:
    torch, eng, remote, peer = gpair
    dst = eng.import_region(peer, remote.region("zero", 4 * KIB))
    src_t = rand_gpu(torch, 4 * KIB, 5)
    with eng.register(src_t) as src:
        remote.check("expect", key="z", imm=304, count=2)
        eng.write(src, dst, 0, imm=304).result(60)
        eng.write_imm(peer, 304).result(60)
        assert remote.check("wait", key="z")["res"] == 0
    assert not remote.read_array("zero").any()


def test_child_writes_into_parent_gpu(gpair) -> None:
    torch, eng, remote, peer = gpair
    n = 2 * 1024 * KIB + 17
    guard = 512
    full = torch.full((n + 2 * guard,), 0xEE, dtype=torch.uint8, device="cuda:0")
    full[guard : guard + n] = 0
    torch.cuda.synchronize()
    with eng.register(full[guard : guard + n]) as mine:
        remote.region("from", n)
        remote.check("fill", name="from", seed=6)
        remote.check("import", name="parent", _blob=mine.descriptor)
        exp = eng.expect_imm(305, 1)
        remote.check("write", src="from", dst="parent", nbytes=n, imm=305)
        exp.result(60)
        torch.cuda.synchronize()
        g = torch.Generator(device="cpu").manual_seed(6)
        want = torch.randint(0, 256, (n,), dtype=torch.uint8, generator=g)
        got = full.cpu()
        assert torch.equal(got[guard : guard + n], want)
        assert bool((got[:guard] == 0xEE).all() and (got[guard + n :] == 0xEE).all())


def test_scatter_into_gpu_region(gpair) -> None:
    torch, eng, remote, peer = gpair
    n = 256 * KIB
    dst = eng.import_region(peer, remote.region("sc", n))
    src_t = rand_gpu(torch, 512 * KIB, 7)
    group = eng.group([peer])
    entries = [(0, dst, 100000, 0, 10), (0, dst, 0), (0, dst, 64 * KIB, 300000, n - 64 * KIB)]
    with eng.register(src_t) as src:
        remote.check("expect", key="sc", imm=306, count=len(entries))
        c = eng.scatter(group, src, entries, imm=306)
        assert c.result(60) == 0 and c.statuses == [0, 0, 0]
        assert remote.check("wait", key="sc")["res"] == 0
    host = src_t.cpu().numpy()
    want = np.zeros(n, np.uint8)
    want[10:100010] = host[:100000]
    want[n - 64 * KIB :] = host[300000 : 300000 + 64 * KIB]
    assert np.array_equal(remote.read_array("sc"), want)
    assert remote.check("disarm", imm=306)["arrived"] == 0
    group.close()
