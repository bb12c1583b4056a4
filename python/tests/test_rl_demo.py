"""The RL weight-update demo as tests: trainer and inference processes on this
machine, every tensor verified bit-exact after every step (bench/rl_demo.py).

* 4 trainers (2 "nodes" of 2: HSDP, experts across nodes) -> 2 inference
  ranks over tcp, double-buffered;
* 3 trainers (uneven FSDP shards) -> 2 inference ranks over shm, one buffer
  with pause/resume;
* the published design's plan (all-gathers, sends from full tensors) on shm;
* a fault: inference rank 1 exits when the first write of step 1 lands; every
  trainer's update(1) raises naming it within the deadline while rank 0 still
  gets step 1; a new process replaces it (new engine, re-registered memory,
  tensors at other offsets), the schedule is patched for that rank only, and
  steps 2 and 3 verify again;
* the same with CUDA tensors (processes sharing the GPU), skipped without CUDA.
"""
from __future__ import annotations

import os
import sys

import pytest

pytestmark = pytest.mark.rl

torch = pytest.importorskip("torch", reason="torch is not installed: the RL demo tests need torch")
if not hasattr(torch, "float8_e4m3fn"):
    pytest.skip(f"torch {torch.__version__} has no float8_e4m3fn", allow_module_level=True)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))
import rl_demo  # noqa: E402


def _steps(demo, steps):
    for s in steps:
        probs = rl_demo.check_step(demo.step(s), s)
        assert not probs, probs


def _cuda():
    if not torch.cuda.is_available():
        pytest.skip("CUDA is not available here: the GPU variant of the RL demo runs on the GPU machine")
    return "cuda"


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_four_trainers_to_two_ranks_tcp(device):
    if device == "cuda":
        _cuda()
    demo = rl_demo.Demo(4, 2, 2, "tcp", device, 2)
    try:
        assert demo.schedule.summary()["gathers"] != [0] * 4  # experts straddle 128-row blocks: some gathers
        _steps(demo, range(2))
    finally:
        demo.close()


def test_three_trainers_uneven_shards_single_buffer_shm():
    demo = rl_demo.Demo(3, 3, 2, "shm", "cpu", 1)
    try:
        _steps(demo, range(2))
    finally:
        demo.close()


def test_published_design_plan_shm():
    """The published design's plan: every parameter all-gathered on a mesh,
    copies and preparations from the full tensors."""
    demo = rl_demo.Demo(4, 2, 2, "shm", "cpu", 2, mode="published")
    try:
        assert all(t[4] == -1 for g in demo.schedule.gathers for ts in g.values() for t in ts)
        _steps(demo, [0])
    finally:
        demo.close()


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_rank_killed_mid_update_fails_the_step_then_is_replaced(device):
    if device == "cuda":
        _cuda()
    demo = rl_demo.Demo(4, 2, 2, "tcp", device, 2, slow_step=1)
    try:
        _steps(demo, [0])
        demo.kill_mid_update(1, 1)
        res = demo.step(1, expect_fail=1)
        for t, r in enumerate(res["trainers"]):
            assert not r["ok"], f"trainer {t} did not notice the dead rank"
            assert "inference 1" in r["failed"], r
            assert "inference 0" not in r["failed"], r
            assert r["seconds"] < 20, f"trainer {t} took {r['seconds']:.1f} s (deadline 20 s)"
        assert res["inference"][0]["ok"], res["inference"][0]  # the live rank got step 1 complete
        n1 = sum(1 for p in demo.schedule.programs for g in p for task in g for d in task[-1] if d[0] == 1)
        before = demo.schedule.to_json()
        changed = demo.replace(1, 2)
        assert changed == n1 and demo.schedule.epoch == 1
        after = demo.schedule.to_json()
        assert after["expected"] == before["expected"] and after["gathers"] == before["gathers"]
        _steps(demo, [2])
    finally:
        demo.close()


def test_mismatch_report_names_the_cause():
    """What an inference rank logs about a wrong tensor: the reciprocal-formula
    scales of the first GPU run, stale bytes of the previous step, and bytes
    never written are each told apart (no processes: the report itself)."""
    from xfer.rl import models

    spec = models.SMALL
    shapes = {n: s for n, s, _ in spec.params()}
    targets, _ = models.rank_targets(spec, 0, 2)
    t = next(t for t in targets if t.name == "layers.0.qkv")
    full = {n: rl_demo.weight(n, 1, s) for n, s in shapes.items()}
    want, want_s = rl_demo.expected_target(t, full)
    x = torch.empty(t.shape, dtype=torch.bfloat16)
    for p in t.pieces:
        src = full[p.source].reshape(-1, full[p.source].shape[-1])
        x[p.at[0]:p.at[0] + p.height, p.at[1]:p.at[1] + p.width] = src[p.rows[0]:p.rows[1], p.cols[0]:p.cols[1]]
    q, s = rl_demo._old_quantize(x)
    assert not torch.equal(s, want_s), "the old formula should differ here (step 1, layers.0.qkv)"
    msg = rl_demo.describe_mismatch(t, q, s, want, want_s, 1, shapes)
    assert "amax * (1/448)" in msg and "ulp" in msg, msg
    prev = rl_demo.expected_target(t, {n: rl_demo.weight(n, 0, s) for n, s in shapes.items()})
    assert "stale" in rl_demo.describe_mismatch(t, prev[0], prev[1], want, want_s, 1, shapes)
    zero = torch.zeros_like(want)
    assert "never written" in rl_demo.describe_mismatch(t, zero, torch.zeros_like(want_s), want, want_s, 1, shapes)
