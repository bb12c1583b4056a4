"""xfer.kv from Python: what a KV pool may be, and a request end to end.

A decoder and a prefiller live in this one process (each with its own engine
and control thread), so a request needs no second process: the test plays
both applications in turn. Pools are numpy arrays, torch CPU tensors where
torch is installed, and torch CUDA tensors where a GPU is usable.
"""
from __future__ import annotations

import time
import types

import numpy as np
import pytest

import xfer
from xfer import kv
from conftest import PROVIDERS
from remote import engine_kwargs

pytestmark = pytest.mark.local


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def small_layout(pages: int = 16) -> kv.Layout:
    return kv.Layout(kind=kv.GQA, layers=3, pages=pages, page_tokens=4, kv_heads=2, head_dim=8,
                     dtype_bytes=2, fused=0, tp_size=1, tp_rank=0)


def _kw(provider: str) -> dict:
    kw = engine_kwargs(provider)
    return {"provider": kw["provider"], "nics": kw.get("nics")}


def run_request(provider: str, dec_pool, pf_pool, read, fill=None, tokens: int = 37,
                ctx: bytes = b"first token 42") -> None:
    """One request from admission to the decoder's event, every page of
    every layer compared. `read(pool)` gives a pool's bytes as a numpy uint8
    array; `fill(pool, data)` writes the prefiller's (default: into read())."""
    lay = small_layout()
    npages = -(-tokens // lay.page_tokens)
    pf_pages = [(i * 5 + 3) % lay.pages for i in range(npages)]  # scattered, as a real pool
    try:
        dec = kv.Decoder(lay, dec_pool, ctx_bytes=64, **_kw(provider))
    except (xfer.NoProvider, xfer.NotFound) as ex:
        pytest.skip(f"provider {provider} is not available here: {ex}")
    with dec, kv.Prefiller(lay, pf_pool, ctx_bytes=64, **_kw(provider)) as pf:
        group = dec.join([(pf.address, lay)])
        dec.admit(7, group, tokens, timeout_ms=20000)
        deadline = time.monotonic() + 20
        new = []
        while not new and time.monotonic() < deadline:
            new = [e for e in pf.poll(timeout_ms=200) if e.type == kv.PF_NEW]
        assert new and new[0].id == 7 and new[0].npages == npages
        data = np.random.default_rng(tokens).integers(0, 256, lay.nbytes, dtype=np.uint8)
        if fill is None:
            read(pf_pool)[:] = data
        else:
            fill(pf_pool, data)
        pf.bind(7, pf_pages)
        for layer in range(lay.layers):
            pf.layers_done(7, layer + 1)
        pf.finish(7, ctx)
        evs = []
        while not evs and time.monotonic() < deadline:
            evs = dec.poll(timeout_ms=200)
        assert evs, "no decoder event within 20 s"
        ev = evs[0]
        assert (ev.id, ev.status) == (7, 0)
        assert ev.ctx[: len(ctx)] == ctx
        got = read(dec_pool)
        page_bytes = lay.nbytes // (lay.layers * 2 * lay.pages)  # separate K and V planes
        for plane in range(lay.layers * 2):
            base = plane * lay.pages * page_bytes
            for i, (sp, dp) in enumerate(zip(pf_pages, ev.pages)):
                s = data[base + sp * page_bytes: base + (sp + 1) * page_bytes]
                d = got[base + dp * page_bytes: base + (dp + 1) * page_bytes]
                assert np.array_equal(s, d), f"plane {plane}, request page {i}"
        dec.release(7)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_numpy_pools_end_to_end(provider: str) -> None:
    lay = small_layout()
    run_request(provider, np.zeros(lay.nbytes, np.uint8), np.zeros(lay.nbytes, np.uint8), lambda a: a)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_torch_cpu_pools_end_to_end(provider: str) -> None:
    torch = _torch()
    if torch is None:
        pytest.skip("torch is not installed (pip install torch to run the torch KV tests)")
    lay = small_layout()
    # bf16 pools, as a model keeps them; the layout counts bytes, not elements.
    dec_pool = torch.zeros(lay.nbytes // 2, dtype=torch.bfloat16)
    pf_pool = torch.zeros(lay.nbytes // 2, dtype=torch.bfloat16)
    run_request(provider, dec_pool, pf_pool, lambda t: t.view(torch.uint8).numpy())


def test_pool_is_checked_and_kept() -> None:
    lay = small_layout()
    kw = _kw("tcp")
    with pytest.raises(xfer.InvalidArgument, match="needs"):
        kv.Decoder(lay, np.zeros(lay.nbytes - 1, np.uint8), **kw)
    with pytest.raises(xfer.InvalidArgument, match="read-only"):
        kv.Prefiller(lay, bytes(lay.nbytes), **kw)
    with pytest.raises(xfer.InvalidArgument):
        kv.Decoder(lay, np.zeros((2, lay.nbytes), np.uint8)[:, ::2], **kw)  # not contiguous
    pool = np.zeros(lay.nbytes, np.uint8)
    with kv.Decoder(lay, pool, **kw) as dec:
        assert dec.pool_device == xfer.Device("cpu")
        assert "tcp" in dec.provider
        assert dec._pool[0] is pool  # the pool lives as long as the decoder
    torch = _torch()
    if torch is not None:
        with pytest.raises(xfer.InvalidArgument, match="contiguous"):
            kv.Prefiller(lay, torch.zeros(lay.nbytes, 2, dtype=torch.uint8).t(), **kw)


class FakeCudaTensor:
    """Quacks like a torch CUDA tensor: its pointer must never reach libxfer
    on a machine where libxfer cannot use CUDA."""

    __module__ = "torch"

    def __init__(self, nbytes: int) -> None:
        self.device = types.SimpleNamespace(type="cuda", index=1)
        self.nbytes = nbytes

    def data_ptr(self) -> int:
        return 0x7F0000000000

    def is_contiguous(self) -> bool:
        return True

    def numel(self) -> int:
        return self.nbytes

    def element_size(self) -> int:
        return 1


def test_gpu_pool_refused_without_cuda() -> None:
    if xfer.cuda_available():
        pytest.skip("CUDA is usable here: the fake device pointer would reach the driver")
    lay = small_layout()
    with pytest.raises((xfer.NoGPU, xfer.NotSupported), match="cuda:1"):
        kv.Decoder(lay, FakeCudaTensor(lay.nbytes), **_kw("tcp"))
    with pytest.raises((xfer.NoGPU, xfer.NotSupported), match="cuda:1"):
        kv.Prefiller(lay, FakeCudaTensor(lay.nbytes), **_kw("tcp"))


@pytest.mark.parametrize("path", ["ipc", "staged"])
@pytest.mark.parametrize("provider", PROVIDERS)
def test_cuda_pools_end_to_end(provider: str, path: str, monkeypatch) -> None:
    """GPU pools on both sides (two GPUs when there are two): the pages land
    in device memory, over the same-host CUDA IPC path or staged through the
    pinned host mirrors (XFER_GPU_IPC=0, read when an engine is created)."""
    torch = _torch()
    if torch is None:
        pytest.skip("torch is not installed: the GPU KV test needs torch with CUDA")
    if not torch.cuda.is_available():
        pytest.skip("no GPU here (torch.cuda.is_available() is False): the GPU KV test runs on a GPU machine")
    if not xfer.cuda_available():
        pytest.skip("libxfer cannot use CUDA here (xfer_cuda_available() is 0)")
    monkeypatch.setenv("XFER_GPU_IPC", "1" if path == "ipc" else "0")
    lay = small_layout()
    dec_dev = "cuda:1" if torch.cuda.device_count() > 1 else "cuda:0"
    dec_pool = torch.zeros(lay.nbytes, dtype=torch.uint8, device=dec_dev)
    pf_pool = torch.zeros(lay.nbytes, dtype=torch.uint8, device="cuda:0")

    def fill(t, data):
        # As a kernel would have written the pages: done before layers_done.
        t.copy_(torch.from_numpy(data))
        torch.cuda.synchronize(t.device)

    def read(t):
        torch.cuda.synchronize(t.device)
        return t.cpu().numpy()

    run_request(provider, dec_pool, pf_pool, read, fill)
