"""xfer.moe on the CPU path: the whole protocol (route vectors, private
bursts, overflow, per-source counters, CONS, combine) between 2, 3 and 4
processes on each provider, checked bit for bit against the reference made
of plain torch ops from every rank's inputs; the halves split; fp8 with
scales; a dead rank; a round over capacity; argument checking. Skipped, with
the reason, where torch is not installed."""
from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch", reason="xfer.moe needs PyTorch (pip install torch); the C tests "
                            "(ctest -L moe) cover the protocol without it")

import xfer  # noqa: E402
from xfer import moe  # noqa: E402

from conftest import PROVIDERS  # noqa: E402
from moe_ranks import run_ranks  # noqa: E402


def spec_for(world, provider, **kw):
    s = dict(world=world, experts=4 * world, topk=6 if world == 2 else 4, hidden=128, max_tokens=24,
             rounds=12, private_tokens=3, provider=provider, timeout_ms=30000)
    s.update(kw)
    return s


# Each world size runs its scenarios in one set of processes (starting
# processes that import torch is the slow part).
SCENARIOS = {
    # padded, top-6 over 2 ranks: most tokens to both; then a round over capacity
    2: [("check_rounds", {}), ("check_capacity", {})],
    # packed layout with aligned segments; fp8 quantized by dispatch
    3: [("check_rounds", {"layout": "packed", "expert_align": 4}),
        ("check_rounds", {"fp8": True, "rounds": 8})],
    # the send and receive halves apart; fp8 tokens given with their scales
    4: [("check_rounds", {"split": True}), ("check_rounds", {"fp8": True, "prequantized": True, "rounds": 8})],
}


@pytest.mark.pair
@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("world", [2, 3, 4])
def test_protocol(provider, world):
    scen = SCENARIOS[world]
    res = run_ranks(world, "check_many", spec_for(world, provider, scenarios=scen))
    for i, (name, extra) in enumerate(scen):
        per_rank = [r[i] for r in res]
        if name == "check_rounds":
            rounds = extra.get("rounds", 12)
            assert all(r["rounds"] == rounds for r in per_rank), per_rank
            assert sum(r["overflow"] for r in per_rank) > 0, "no round overflowed the private slots"
            assert sum(r["tokens"] for r in per_rank) > 0
        else:
            assert all("expert 0" in r["error"] for r in per_rank), per_rank


@pytest.mark.pair
@pytest.mark.parametrize("provider", PROVIDERS)
def test_dead_rank(provider):
    res = run_ranks(3, "check_dead_rank", spec_for(3, provider, timeout_ms=3000, heartbeat_ms=200), may_die=2)
    for r in res[:2]:
        assert "rank 2" in r["error"], r


def _one(**kw):
    args = dict(max_tokens=8, num_experts=4, topk=2, hidden=32, provider="shm", heartbeat_ms=0)
    args.update(kw)
    return moe.MoE(moe.RankGroup(0, 1, lambda b: [b]), **args)


def test_single_rank_and_arguments():
    """One rank alone (no peers): the protocol's local half; and every
    argument mistake is an InvalidArgument saying what is wrong."""
    try:
        ep = _one()
    except (xfer.NoProvider, xfer.NotFound) as ex:
        pytest.skip(f"shm is not available: {ex}")
    with ep:
        x = torch.randn(5, 32).to(torch.bfloat16)
        idx = torch.tensor([[0, 3], [1, -1], [2, 2], [3, 0], [-1, -1]])
        w = torch.rand(5, 2)
        d = ep.dispatch(x, idx, w)
        assert d.expert_counts.tolist() == [2, 1, 2, 2]  # expert 2: token 2 twice
        y = d.expert_x.clone()
        out = ep.combine(y, d.handle)
        want = torch.zeros(5, 32)
        for k in range(2):
            v = idx[:, k] >= 0
            want[v] = want[v] + w[v, k:k + 1] * x[v].float()
        assert torch.equal(out, want.to(torch.bfloat16))
        bad = [
            (lambda: ep.dispatch(x.float(), idx, w), "bfloat16"),
            (lambda: ep.dispatch(torch.zeros(9, 32, dtype=torch.bfloat16), torch.zeros(9, 2, dtype=torch.int64)),
             "max_tokens"),
            (lambda: ep.dispatch(x, idx[:, :1], w), "shape"),
            (lambda: ep.dispatch(x[:, ::2], idx, w), "shape"),
            (lambda: ep.dispatch(x.t().contiguous().t(), idx, w), "contiguous"),
            (lambda: ep.dispatch(x, idx.float(), w), "topk_idx"),
            (lambda: ep.dispatch(x, idx, w, x_scales=torch.ones(5, 1)), "x_scales"),
        ]
        for fn, word in bad:
            with pytest.raises(xfer.InvalidArgument, match=word):
                fn()
        d = ep.dispatch(x, idx, w, do_recv=False)
        with pytest.raises(xfer.InvalidArgument, match="previous round"):
            ep.dispatch(x, idx, w)
        with pytest.raises(xfer.InvalidArgument, match="latest dispatch"):
            ep.combine(y, d.handle)  # not received yet
        d = ep.dispatch(do_send=False, handle=d.handle)
        with pytest.raises(xfer.InvalidArgument, match="expert_out"):
            ep.combine(torch.zeros(3, 3, dtype=torch.bfloat16), d.handle)
        with pytest.raises(xfer.InvalidArgument, match="latest dispatch"):
            ep.combine(y, None)
    with pytest.raises(xfer.InvalidArgument, match="multiple of world_size"):
        moe.MoE(moe.RankGroup(0, 2, lambda b: [b, b]), max_tokens=8, num_experts=3, topk=2, hidden=32)
    with pytest.raises(xfer.InvalidArgument, match="hidden"):
        _one(hidden=30)
    with pytest.raises(xfer.InvalidArgument, match="dispatch_dtype"):
        _one(dispatch_dtype=torch.float16)
    if not torch.cuda.is_available():
        with pytest.raises(xfer.InvalidArgument, match="device"):
            _one(device="meta")


def test_buffer_sizes():
    """The decode shape of the issue (EP8, 256 experts, top-8, 7168, fp8)."""
    z = moe.buffer_sizes(8, max_tokens=128, num_experts=256, topk=8, hidden=7168, fp8=True)
    assert z["record_bytes"] == 7168 + 224 + 80
    assert z["send_bytes"] == 128 * 8 * z["record_bytes"]
    assert z["recv_bytes"] == 8 * 128 * z["record_bytes"]  # private slots of T: nothing overflows
    assert z["comb_recv_bytes"] == 128 * 8 * 7168 * 2
    one_host = moe.buffer_sizes(8, max_tokens=128, num_experts=256, topk=8, hidden=7168, fp8=True,
                                remote_ranks=0)
    assert one_host["recv_bytes"] == 0 and one_host["comb_send_bytes"] == 0


def test_structs_match_header(tmp_path):
    """The ctypes mirror of include/xfer_moe.h has the C layout (compiled probe)."""
    import shutil
    import subprocess

    cc = shutil.which("cc") or shutil.which("gcc")
    inc = os.environ.get("XFER_INCLUDE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..", "include")
    if not cc or not os.path.exists(os.path.join(inc, "xfer_moe.h")):
        pytest.skip("no C compiler or no include/xfer_moe.h here")
    from xfer import _moe_lib as ml

    lines = ['#include <stdio.h>', '#include <stddef.h>', '#include "xfer_moe.h"', "int main(void){"]
    for cname, cls in ml.STRUCTS.items():
        lines.append(f'printf("{cname} %zu\\n", sizeof(struct {cname}));')
        for fname, _ in cls._fields_:
            if not fname.startswith("pad"):
                lines.append(f'printf("{cname}.{fname} %zu\\n", offsetof(struct {cname}, {fname}));')
    lines.append("return 0;}")
    src = tmp_path / "probe.c"
    src.write_text("\n".join(lines))
    exe = tmp_path / "probe"
    subprocess.run([cc, "-I", inc, str(src), "-o", str(exe)], check=True)
    got = dict(line.rsplit(" ", 1) for line in subprocess.run([str(exe)], capture_output=True, text=True,
                                                                check=True).stdout.split("\n") if line)
    for cname, cls in ml.STRUCTS.items():
        assert int(got[cname]) == ctypes_sizeof(cls), cname
        for fname, _ in cls._fields_:
            if not fname.startswith("pad"):
                assert int(got[f"{cname}.{fname}"]) == getattr(cls, fname).offset, f"{cname}.{fname}"


def ctypes_sizeof(cls):
    import ctypes
    return ctypes.sizeof(cls)


def test_cuda_library_loads_and_says_why():
    """libxfer_moe_cuda.so (where it was built) loads without a GPU, and its
    create fails with a message rather than crashing (a GPU machine builds
    for real instead: test_moe_cuda.py)."""
    import ctypes

    from xfer import _moe_lib as ml

    try:
        ml.cuda_lib()
    except xfer.NotSupported as ex:
        assert "libxfer_moe_cuda.so" in str(ex)
        pytest.skip(f"not built here: {ex}")
    assert ml.g.cuda_version() == ml.CUDA_VERSION
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: test_moe_cuda.py covers the real thing")
    assert ml.g.cuda_mps_enabled(0) < 0 and ml.cuda_error(), "asking for MPS without a GPU must fail"
    assert ml.g.cuda_kernels_loaded(None) < 0
    c = moe._config(2, 0, max_tokens=8, num_experts=4, topk=2, hidden=128, fp8=True, private_tokens=None,
                    overflow_tokens=None, layout="padded", expert_capacity=None, expert_align=None,
                    timeout_ms=1000)
    bufs, h = ml.Buffers(), ctypes.c_void_p()
    rc = ml.g.cuda_create(ctypes.byref(c), 0, ml.WAIT_STREAM, ctypes.byref(bufs), ctypes.byref(h))
    assert rc < 0 and not h.value
    msg = ml.cuda_error()
    assert msg, "no message for the failure"
    assert ml.g.cuda_connect(None, None, None) < 0 and "bad arguments" in ml.cuda_error()
    assert ml.g.cuda_dispatch_send(None, 0, None, None, 0, None, 4, 0) < 0 and "no module" in ml.cuda_error()
