"""The prefill compute of pd_gpu_bench.py: one tensor-parallel rank of a
Qwen3-style transformer with random weights, writing each layer's K and V
into the pages of a KV pool laid out as ``xfer.kv.Layout`` says.

Per layer: RMSNorm, fused QKV projection, per-head RMSNorm of q and k
(Qwen3's QK-norm), rotary embedding, K and V written into the request's
pages, causal GQA attention (``scaled_dot_product_attention``), output
projection, residual, RMSNorm, SwiGLU MLP, residual. Tensor-parallel
all-reduces are not modelled: this is one rank's compute.

The MLP is dense with the width whose FLOPs equal the active experts' of
the MoE model (Qwen3-235B-A22B: 8 of 128 experts of width 1536, split over
4 ranks: 8 * 1536 / 4 = 3072 per rank), so compute per token matches the
22B-active model; the router and expert dispatch are not modelled.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Optional, Sequence

import torch
import torch.nn.functional as F


@dataclass
class Shape:
    layers: int
    hidden: int
    q_heads: int
    kv_heads: int
    head_dim: int
    ffn: int

    def flops_per_token(self, tokens: int) -> float:
        """Matmul FLOPs of one layer for one token of a `tokens`-long causal prefill."""
        d, hd = self.hidden, self.head_dim
        qkv = 2 * d * (self.q_heads + 2 * self.kv_heads) * hd
        out = 2 * self.q_heads * hd * d
        mlp = 2 * 3 * d * self.ffn
        attn = 2 * 2 * self.q_heads * hd * (tokens + 1) / 2  # QK^T and PV, causal: half the keys
        return qkv + out + mlp + attn


def _rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    if hasattr(F, "rms_norm"):
        return F.rms_norm(x, (x.shape[-1],), w, eps)
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


class Attention:
    """Causal GQA through SDPA. On a GPU the math backend (which would
    materialize the T x T scores: 512 GiB at 128K tokens) is excluded, and
    grouped heads go natively (enable_gqa) where the installed torch's
    kernels take them, else K and V are broadcast to the query heads."""

    def __init__(self, device: torch.device, q_heads: int, kv_heads: int, head_dim: int) -> None:
        self.group = q_heads // kv_heads
        self.no_math = None  # a context manager that leaves the math backend out
        self.gqa = False
        if device.type == "cuda":
            try:
                from torch.nn.attention import SDPBackend, sdpa_kernel

                fast = [b for b in (getattr(SDPBackend, n, None) for n in
                                    ("FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION"))
                        if b is not None]
                self.no_math = lambda: sdpa_kernel(fast)
            except ImportError:  # torch < 2.3
                self.no_math = lambda: torch.backends.cuda.sdp_kernel(enable_math=False)
        q = torch.randn(1, q_heads, 256, head_dim, device=device, dtype=torch.bfloat16)
        kv = torch.randn(1, kv_heads, 256, head_dim, device=device, dtype=torch.bfloat16)
        try:
            self.gqa = True
            self(q, kv, kv)
        except (TypeError, RuntimeError):
            self.gqa = False
            self(q, kv, kv)  # raises if no kernel at all takes it

    @property
    def path(self) -> str:
        return "enable_gqa" if self.gqa else "K/V broadcast to query heads"

    def _sdpa(self, q, k, v):
        if self.gqa:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        if self.group > 1:
            k = k.repeat_interleave(self.group, dim=1)
            v = v.repeat_interleave(self.group, dim=1)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def __call__(self, q, k, v):
        if self.no_math is None:
            return self._sdpa(q, k, v)
        with self.no_math():
            return self._sdpa(q, k, v)


class Model:
    """Random weights for every layer; `prefill` runs them over a prompt."""

    def __init__(self, shape: Shape, max_tokens: int, device: torch.device, seed: int = 7) -> None:
        self.s = shape
        self.device = device
        # Generated where they are used: a host generator would take seconds
        # for the ~1 G random numbers of 16 full-size layers.
        g = torch.Generator(device=device).manual_seed(seed)
        dt = torch.bfloat16
        d, hd = shape.hidden, shape.head_dim

        def w(rows: int, cols: int) -> torch.Tensor:
            return (torch.randn(rows, cols, generator=g, device=device) / math.sqrt(rows)).to(dt)

        self.layers = []
        for _ in range(shape.layers):
            self.layers.append({
                "ln1": torch.ones(d, dtype=dt, device=device),
                "ln2": torch.ones(d, dtype=dt, device=device),
                "qn": torch.ones(hd, dtype=dt, device=device),
                "kn": torch.ones(hd, dtype=dt, device=device),
                "wqkv": w(d, (shape.q_heads + 2 * shape.kv_heads) * hd),
                "wo": w(shape.q_heads * hd, d),
                "wgu": w(d, 2 * shape.ffn),
                "wd": w(shape.ffn, d),
            })
        self.embed = torch.randn(max_tokens, d, generator=g, device=device, dtype=dt)
        pos = torch.arange(max_tokens, dtype=torch.float32)
        inv = 1.0 / (1e6 ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))  # Qwen3 rope theta
        ang = torch.outer(pos, inv)
        self.cos = torch.cat([ang.cos(), ang.cos()], -1).to(dt).to(device)[:, None, :]
        self.sin = torch.cat([ang.sin(), ang.sin()], -1).to(dt).to(device)[:, None, :]
        self.attn = Attention(device, shape.q_heads, shape.kv_heads, hd)

    def _rope(self, x: torch.Tensor, n: int) -> torch.Tensor:
        half = x.shape[-1] // 2
        rot = torch.cat([-x[..., half:], x[..., :half]], -1)
        return x * self.cos[:n] + rot * self.sin[:n]

    def layer(self, i: int, x: torch.Tensor, kv_write) -> torch.Tensor:
        s, w, n = self.s, self.layers[i], x.shape[0]
        hd = s.head_dim
        h = _rms_norm(x, w["ln1"])
        qkv = h @ w["wqkv"]
        q, k, v = qkv.split([s.q_heads * hd, s.kv_heads * hd, s.kv_heads * hd], -1)
        q = self._rope(_rms_norm(q.view(n, s.q_heads, hd), w["qn"]), n)
        k = self._rope(_rms_norm(k.view(n, s.kv_heads, hd), w["kn"]), n)
        v = v.view(n, s.kv_heads, hd)
        kv_write(i, k, v)
        o = self.attn(q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None])
        x = x + o[0].transpose(0, 1).reshape(n, s.q_heads * hd) @ w["wo"]
        h = _rms_norm(x, w["ln2"])
        gate, up = (h @ w["wgu"]).chunk(2, -1)
        return x + (F.silu(gate) * up) @ w["wd"]

    def prefill(self, tokens: int, kv_write, after_layer=None) -> torch.Tensor:
        """Every layer over the first `tokens` positions (launched, not waited
        for, on a GPU); `after_layer(i)` runs once layer i is launched.
        Returns the last position's hidden state."""
        x = self.embed[:tokens]
        for i in range(self.s.layers):
            x = self.layer(i, x, kv_write)
            if after_layer is not None:
                after_layer(i)
        return x[-1]


class PagedKV:
    """A KV pool of `xfer.kv.Layout` shape with separate K and V planes
    (fused = 0): [layers][K, V][pages][kv_heads][page_tokens][head_dim]."""

    def __init__(self, pool: torch.Tensor, layers: int, pages: int, kv_heads: int, page_tokens: int,
                 head_dim: int) -> None:
        self.pt = page_tokens
        self.view = pool.view(layers, 2, pages, kv_heads, page_tokens, head_dim)

    def writer(self, pages: torch.Tensor):
        """kv_write(layer, k, v) for a prompt whose pages are `pages` (a
        device index tensor, page i holding tokens [i*pt, (i+1)*pt))."""
        pt, view = self.pt, self.view

        def write(layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
            n, heads, hd = k.shape
            if n % pt:
                raise ValueError(f"{n} tokens is not a whole number of {pt}-token pages")
            idx = pages[: n // pt]
            for c, t in ((0, k), (1, v)):
                view[layer, c].index_copy_(0, idx, t.view(n // pt, pt, heads, hd).transpose(1, 2))

        return write

    def sums(self, pages: Sequence[int], layers: Optional[int] = None) -> List[int]:
        """A position-weighted sum of each layer's K and V pages, in request
        order: equal on both sides only if every page landed where it should."""
        idx = torch.tensor(list(pages), dtype=torch.long, device=self.view.device)
        out = []
        for layer in range(layers if layers is not None else self.view.shape[0]):
            a = self.view[layer].index_select(1, idx).contiguous().view(torch.int16).reshape(-1)
            wts = torch.arange(a.numel(), device=a.device, dtype=torch.int64) % 65521 + 1
            out.append(int((a.to(torch.int64) * wts).sum().item()))
        return out
