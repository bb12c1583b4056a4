"""FP8 (e4m3fn) quantization with per-block scales, as DeepSeek-V3 stores its
weights: each ``block x block`` tile of the matrix gets one float32 scale
``s = amax(|tile|) / 448`` (1 for an all-zero tile), and the stored values are
``tile / s`` rounded to float8_e4m3fn; ``q * s`` dequantizes.

Plain torch ops, on whatever device the input is: the trainer quantizes on
its GPU (or CPU); the tests compare the bytes with a block-by-block loop.

The result must be the same bytes on every device, so every division here
has a tensor of the operand's shape as its divisor. PyTorch's CUDA kernel
turns ``t / c`` with a host scalar ``c`` (a Python float, or a 0-dim CPU
tensor) into ``t * (1 / c)``, which differs from the division by one ulp for
some values: the first GPU run's scales differed from the CPU reference in
most FP8 tensors, and the values wherever a rounding flipped with them.
"""
from __future__ import annotations

from typing import Optional, Tuple

FP8_MAX = 448.0


def quantize(x, block: int = 128, out=None, scales_out=None) -> Tuple[object, object]:
    """(values, scales) of the 2-D tensor ``x``: values float8_e4m3fn of x's
    shape, scales float32 ``[ceil(rows/block), ceil(cols/block)]``. ``out`` and
    ``scales_out``, when given, receive them (views into a staging pool)."""
    import torch

    rows, cols = x.shape
    nrb, ncb = -(-rows // block), -(-cols // block)
    xf = x.float()
    pr, pc = nrb * block - rows, ncb * block - cols
    if pr or pc:  # zero padding never raises a tile's amax
        xf = torch.nn.functional.pad(xf, (0, pc, 0, pr))
    tiles = xf.view(nrb, block, ncb, block)
    amax = tiles.abs().amax(dim=(1, 3))
    # a divisor of amax's shape on amax's device: a true division on any device (module docstring)
    scale = torch.where(amax > 0, amax / torch.full_like(amax, FP8_MAX), torch.ones_like(amax))
    q = (tiles / scale[:, None, :, None]).clamp_(-FP8_MAX, FP8_MAX).view(nrb * block, ncb * block)
    return store(q[:rows, :cols], scale, out, scales_out)


def store(q, scale, out=None, scales_out=None):
    """quantize's result: FP8 values of q and the scales, into out and
    scales_out when given (a staging buffer, a registered region), else new."""
    import torch

    if out is None:
        out = q.to(torch.float8_e4m3fn)
    else:
        out.copy_(q)
    if scales_out is None:
        scales_out = scale
    else:
        scales_out.copy_(scale)
    return out, scales_out


def dequantize(q, scales, block: int = 128):
    """float32 values of (q, scales): for checks and for a consumer."""
    import torch

    rows, cols = q.shape
    s = scales.repeat_interleave(block, 0).repeat_interleave(block, 1)[:rows, :cols]
    return q.to(torch.float32) * s


def torch_dtype(name: str):
    import torch

    return getattr(torch, name)


def available() -> Optional[str]:
    """None if torch with float8_e4m3fn is importable, else why not."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not hasattr(torch, "float8_e4m3fn"):
        return f"torch {torch.__version__} has no float8_e4m3fn"
    return None
