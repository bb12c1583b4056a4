"""xfer.rl without processes: layouts, the planner, the schedule's wire form,
validation, patching, the staging pool and FP8 quantization."""
from __future__ import annotations

import json
import random
import zlib

import pytest

from xfer.rl import layout, models, plan
from xfer.rl.layout import LayoutError, Piece, Placer, Shard, Sharded, Target, chunks, fsdp_shards
from xfer.rl.pool import Pool
from xfer.rl.schedule import Schedule, ScheduleError

SMALL = models.SMALL


def _small(trainers=4, node=2, tp=2, instances=1, mode="xfer", explicit=False):
    sh = models.trainer_shards(SMALL, trainers, node)
    if explicit:
        sh = [s for d in sh for s in d.shards()]
    tg, sizes = models.inference_targets(SMALL, instances, tp)
    return sh, tg, sizes, plan.build(sh, tg, mode=mode, region_bytes=sizes)


def test_chunks_are_torch_chunk():
    torch = pytest.importorskip("torch", reason="torch is not installed: comparing with torch.chunk skipped")
    for n in (0, 1, 7, 384, 1000, 641):
        for parts in (1, 2, 3, 8):
            want = [len(c) for c in torch.arange(n).chunk(parts)] if n else []
            got = [b - a for a, b in chunks(n, parts) if b > a]
            assert got == want, (n, parts)


def test_fsdp_shards_tile_the_parameter():
    sh = fsdp_shards("e", (4, 192, 384), "bfloat16", (0, 2, 5))
    assert [s.rows for s in sh] == [(0, 384), (384, 768), (768, 768)]  # whole experts; the last rank holds none
    assert all(s.cols == (0, 384) for s in sh)
    assert Sharded("e", (4, 192, 384), "bfloat16", (0, 2, 5)).shards() == sh


@pytest.mark.parametrize("mode", plan.MODES)
@pytest.mark.parametrize("trainers,node", [(4, 2), (3, 3), (8, 4)])
def test_schedule_covers_every_byte_once_and_balances(mode, trainers, node):
    for explicit in (False, True):
        sh, tg, sizes, s = _small(trainers, node, mode=mode, explicit=explicit)
        s.validate()  # build() did too; once more on the result as a reader would
        sm = s.summary()
        per_rank = [sum(t.nbytes + t.scale_nbytes for t in tg if t.rank == j) for j in range(2)]
        assert sm["ingress"] == per_rank
        mean = sum(sm["egress"]) / trainers
        assert max(sm["egress"]) <= 1.3 * mean, sm["egress"]  # no rank funnels
        assert sum(sm["egress"]) == sum(per_rank)


def test_replicas_share_preparation():
    sh, tg, sizes, s = _small(instances=3, tp=2)
    sm = s.summary()
    one = sum(t.nbytes for t in tg if t.dtype == layout.FP8 and t.rank < 2)
    assert sum(sm["prep_out"]) == one  # each FP8 band quantized once for the 3 instances
    assert sum(sm["ingress"]) == 3 * sum(t.nbytes + t.scale_nbytes for t in tg if t.rank < 2)


def test_direct_copies_need_no_gather():
    """Same-dtype targets come straight from the shards: in xfer mode only FP8
    bands whose rows straddle shards are gathered; published gathers all."""
    _, _, _, s = _small(mode="xfer")
    gathered = {t[2] for g in s.gathers for ts in g.values() for t in ts}
    assert "embed" not in gathered and "lm_head" not in gathered
    assert all(s.params[p][2] == "bfloat16" for p in gathered)
    _, _, _, pub = _small(mode="published")
    pub_gathered = {t[2] for g in pub.gathers for ts in g.values() for t in ts}
    assert {"embed", "lm_head"} <= pub_gathered and gathered < pub_gathered


def test_fused_targets_are_what_the_model_says():
    tg, _ = models.rank_targets(SMALL, 1, 2)
    by = {t.name: t for t in tg}
    qkv = by["layers.0.qkv"]  # rank 1 of 2: q heads 3..5, kv head 1 of 2, each head 64 rows
    assert [(p.source, p.rows, p.at) for p in qkv.pieces] == [
        ("layers.0.q", (192, 384), (0, 0)), ("layers.0.k", (64, 128), (192, 0)), ("layers.0.v", (64, 128), (256, 0))]
    assert qkv.dtype == layout.FP8 and qkv.scale_shape == (3, 3)  # 320 rows: a partial last block
    o = by["layers.0.o"]
    assert o.pieces == (Piece("layers.0.o", (0, 384), (192, 384), (0, 0)),)
    assert [t for t in by if "experts." in t] == [
        "layers.1.experts.2.gate_up", "layers.1.experts.2.down", "layers.1.experts.3.gate_up", "layers.1.experts.3.down"]
    assert by["lm_head"].pieces[0].rows == (500, 1000) and by["norm"].dtype == "bfloat16"


def test_wire_form_round_trips_and_refuses_damage():
    _, _, _, s = _small()
    b = s.to_bytes()
    s2 = Schedule.from_bytes(b)
    assert s2.to_json() == s.to_json()
    assert plan.build(*_small()[:2], region_bytes=_small()[2]).to_bytes() == b  # deterministic
    bad = [b"", b[:10], b"XFRM" + b[4:], b[:4] + b"\x09\x00" + b[6:], b[:-1], b[:-3] + bytes([b[-3] ^ 1]) + b[-2:]]
    for x in bad:
        with pytest.raises(ScheduleError):
            Schedule.from_bytes(x)


@pytest.mark.parametrize("mode", plan.MODES)
def test_a_trainers_slice_runs_the_same_tasks(mode):
    """for_trainer(r): the same program and gathers for r (contents
    renumbered, the same pieces), every mesh, nothing of other trainers, no
    targets; it parses as untrusted bytes, refuses what a slice cannot do,
    and a slice claiming tasks of another trainer is refused."""
    _, _, _, s = _small(trainers=4, node=2, mode=mode)
    for r in range(s.trainers):
        sl = Schedule.from_bytes(s.for_trainer(r).to_bytes())
        assert sl.sliced_for == r and sl.meshes == s.meshes and sl.epoch == s.epoch
        assert sl.region_bytes == s.region_bytes and sl.expected == s.expected and not any(sl.targets)
        for g in range(len(s.groups)):
            a, b = s.program(r, g), sl.program(r, g)
            assert len(a) == len(b)
            for x, y in zip(a, b):
                if x[0] == "prep":
                    assert s.contents[x[2]] == sl.contents[y[2]] and x[:2] + x[3:] == y[:2] + y[3:]
                else:
                    assert x == y
                    if x[0] == "gather":
                        members = s.meshes[x[3]]
                        assert [s.box(x[2], x[3], m) for m in members] == [sl.box(x[2], x[3], m) for m in members]
            assert not any(sl.programs[t][g] for t in range(s.trainers) if t != r)
        assert len(sl.to_bytes()) < len(s.to_bytes())
        with pytest.raises(ScheduleError):
            sl.retarget(0, s.targets[0])
        with pytest.raises(ValueError):
            sl.for_trainer(r)
    d = s.for_trainer(0).to_json()
    d["programs"][1] = [[["copy", 0, "embed", False, 0, 2, 1, 2, [[0, 0, 2]]]] for _ in s.groups]
    with pytest.raises(ScheduleError, match="another trainer"):
        Schedule.from_bytes(_reencode(d))


def _reencode(d) -> bytes:
    import struct

    payload = zlib.compress(json.dumps(d).encode())
    return struct.pack("<4sHIQ", b"XFRL", 1, zlib.crc32(payload), len(payload)) + payload


def test_validation_catches_a_wrong_schedule():
    _, _, _, s = _small()
    good = s.to_json()
    # a copy task duplicated: its bytes written twice
    d = json.loads(json.dumps(good))
    t, g = next((t, g) for t in range(4) for g in range(len(d["groups"])) if d["programs"][t][g])
    d["programs"][t][g].append(d["programs"][t][g][0])
    with pytest.raises(ScheduleError, match="do not match|twice"):
        Schedule.from_bytes(_reencode(d))
    # a task dropped (counts adjusted): bytes never written
    d = json.loads(json.dumps(good))
    task = d["programs"][t][g].pop(0)
    sched = Schedule._from_json(json.loads(json.dumps(d)))
    for j, k in Schedule._imms(task, sched.contents):
        d["expected"][j][t] -= k
    with pytest.raises(ScheduleError, match="not written|cover"):
        Schedule.from_bytes(_reencode(d))
    # a destination moved outside every target
    d = json.loads(json.dumps(good))
    task = next(x for x in d["programs"][t][g] if x[0] in ("copy", "prep"))
    task[-1][0][1] += 1 << 30
    with pytest.raises(ScheduleError):
        Schedule.from_bytes(_reencode(d))
    # structure: an unknown task kind, a destination rank out of range
    for mutate in (lambda x: x.__setitem__(0, "erase"), lambda x: x[-1][0].__setitem__(0, 99)):
        d = json.loads(json.dumps(good))
        mutate(d["programs"][t][g][0])
        with pytest.raises(ScheduleError):
            Schedule.from_bytes(_reencode(d))


def test_layout_errors_name_the_problem():
    base = fsdp_shards("w", (256, 128), "bfloat16", (0, 1))
    t = Target("w", 0, (256, 128), "bfloat16", 0, (Piece("w", (0, 256), (0, 128)),))
    plan.build(base, [t])
    with pytest.raises(LayoutError, match="lacks the shards"):
        plan.build(base[:1], [t])
    with pytest.raises(LayoutError, match="no trainer holds"):
        plan.build(base, [Target("x", 0, (256, 128), "bfloat16", 0, (Piece("x", (0, 256), (0, 128)),))])
    with pytest.raises(LayoutError, match="outside"):
        plan.build(base, [Target("w", 0, (300, 128), "bfloat16", 0, (Piece("w", (0, 300), (0, 128)),))])
    with pytest.raises(LayoutError, match="overlap"):
        Target("w", 0, (256, 128), "bfloat16", 0, (Piece("w", (0, 128), (0, 128)), Piece("w", (128, 256), (0, 128), (127, 0)))).check()
    with pytest.raises(LayoutError, match="cover"):
        Target("w", 0, (256, 128), "bfloat16", 0, (Piece("w", (0, 128), (0, 128)),)).check()
    two = fsdp_shards("w", (256, 128), "bfloat16", (0, 1)) + fsdp_shards("v", (256, 128), "bfloat16", (1, 2))
    with pytest.raises(LayoutError, match="disjoint"):
        plan.build(two, [t])
    fused = Target("f", 0, (512, 128), layout.FP8, 0, (Piece("w", (0, 256), (0, 128)), Piece("v", (0, 256), (0, 128), (256, 0))),
                   scale_offset=1 << 20)
    sep = fsdp_shards("w", (256, 128), "bfloat16", (0,)) + fsdp_shards("v", (256, 128), "bfloat16", (1,))
    with pytest.raises(LayoutError, match="no mesh in common"):
        plan.build(sep, [fused])
    with pytest.raises(LayoutError):
        Shard.from_json(["w", [4], "bfloat16", 0, [1], [0, 4], [0, 1], 0])  # rank outside its mesh


def test_retarget_moves_only_that_rank():
    _, tg, sizes, s = _small()
    mine = [t for t in tg if t.rank == 1]
    pl = Placer(1)
    for t in reversed(mine):
        pl.add(t.name, t.shape, t.dtype, t.pieces, t.block)
    patched, changed = s.retarget(1, pl.targets, pl.nbytes)
    patched.validate()
    assert patched.epoch == s.epoch + 1
    n1 = sum(1 for prog in s.programs for g in prog for task in g for d in task[-1] if d[0] == 1)
    assert changed == n1
    for a, b in zip(s.programs, patched.programs):
        for ga, gb in zip(a, b):
            for ta, tb in zip(ga, gb):
                assert ta[:-1] == tb[:-1]  # who prepares and sends what is unchanged
                assert [d for d in ta[-1] if d[0] != 1] == [d for d in tb[-1] if d[0] != 1]
    assert patched.expected == s.expected
    e, p = mine[0], mine[0].pieces[0]
    other = Target(e.name, 1, e.shape, e.dtype, e.offset, (Piece(p.source, (p.rows[0] - 1, p.rows[1] - 1), p.cols),))
    with pytest.raises(ScheduleError, match="changed content"):
        s.retarget(1, [other] + mine[1:])


def test_pool_never_hands_out_overlapping_bytes():
    rng = random.Random(5)
    p = Pool(1 << 16)
    live = {}
    for _ in range(5000):
        if live and (rng.random() < 0.45 or len(live) > 40):
            off = rng.choice(list(live))
            p.free(off)
            del live[off]
            continue
        n = rng.randint(1, 9000)
        off = p.alloc(n)
        if off is None:
            assert live  # only refused while something is held
            continue
        end = off + layout.align(n)
        assert end <= p.capacity
        for o, e in live.items():
            assert end <= o or e <= off
        live[off] = end
    for off in list(live):
        p.free(off)
    assert p.empty and p.in_use == 0
    with pytest.raises(MemoryError):
        p.alloc(1 << 17)


def _fp8_reference(torch, x):
    """FP8 values and scales of x, one 128 x 128 block at a time, plain ops on the CPU."""
    rq = torch.empty(x.shape, dtype=torch.float8_e4m3fn)
    rs = torch.empty(-(-x.shape[0] // 128), -(-x.shape[1] // 128))
    for i in range(0, x.shape[0], 128):
        for j in range(0, x.shape[1], 128):
            b = x[i:i + 128, j:j + 128].float()
            amax = b.abs().max()
            sc = amax / 448.0 if amax > 0 else torch.tensor(1.0)
            rs[i // 128, j // 128] = sc
            rq[i:i + 128, j:j + 128] = (b / sc).clamp(-448, 448).to(torch.float8_e4m3fn)
    return rq, rs


def test_fp8_is_device_independent():
    """On CUDA, PyTorch computes ``t / c`` with a host scalar ``c`` as
    ``t * (1 / c)`` (BinaryDivTrueKernel.cu), one ulp off the division for
    some values: the first GPU run's FP8 scales differed from the CPU
    reference. Here every division by a Python number or a 0-dim tensor is
    done that way (a dispatch mode); quantize must still match the reference,
    and the mode must break the formula the GPU run used (so that the test
    can fail)."""
    torch = pytest.importorskip("torch", reason="torch is not installed: FP8 quantization tests skipped")
    from torch.utils._python_dispatch import TorchDispatchMode

    from xfer.rl import fp8

    if fp8.available():
        pytest.skip(fp8.available())

    class CudaScalarDivision(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is torch.ops.aten.div.Tensor and (
                    isinstance(args[1], (int, float)) or (isinstance(args[1], torch.Tensor) and args[1].dim() == 0)):
                b = float(args[1])
                inv = torch.tensor(1.0, dtype=torch.float32) / torch.tensor(b, dtype=torch.float32)
                return torch.ops.aten.mul.Tensor(args[0], inv)
            return func(*args, **kwargs)

    g = torch.Generator().manual_seed(5)
    x = (torch.randn(1024, 1024, generator=g) * torch.logspace(-3, 1, 1024).view(-1, 1)).to(torch.bfloat16)
    rq, rs = _fp8_reference(torch, x)
    with CudaScalarDivision():
        q, s = fp8.quantize(x)
        amax = x.float().view(8, 128, 8, 128).abs().amax(dim=(1, 3))
        old = torch.where(amax > 0, amax / fp8.FP8_MAX, torch.ones_like(amax))  # the formula of the first GPU run
    assert torch.equal(s, rs) and torch.equal(q.view(torch.uint8), rq.view(torch.uint8))
    assert not torch.equal(old, rs), "the emulated CUDA division did not change the old formula's scales"


def test_fp8_matches_block_by_block_reference():
    torch = pytest.importorskip("torch", reason="torch is not installed: FP8 quantization tests skipped")
    from xfer.rl import fp8

    if fp8.available():
        pytest.skip(fp8.available())
    g = torch.Generator().manual_seed(3)
    for shape in ((128, 128), (320, 384), (7, 1000), (384, 192)):
        x = (torch.randn(*shape, generator=g) * torch.logspace(-4, 2, shape[0]).view(-1, 1)).to(torch.bfloat16)
        x[:128, :128] = 0  # an all-zero first block (scale 1)
        x[-1, -1] = 1e-3 if shape != (128, 128) else 0
        q, s = fp8.quantize(x)
        rq, rs = _fp8_reference(torch, x)
        assert torch.equal(q.view(torch.uint8), rq.view(torch.uint8)), shape
        assert torch.equal(s, rs), shape
        err = (fp8.dequantize(q, s) - x.float()).abs()
        per = s.repeat_interleave(128, 0).repeat_interleave(128, 1)[: shape[0], : shape[1]]
        # e4m3: 3 mantissa bits (half an ulp: 1/16), subnormals 2^-9 apart in scaled units
        assert bool((err <= x.float().abs() / 16 + per * 2.0 ** -10).all()), shape


def test_model_sizes_match_the_published_counts():
    total, expert = models.KIMI_K2.count()
    assert 1.00e12 < total < 1.05e12 and expert / total > 0.98  # "1T parameters"
    assert abs(models.DEEPSEEK_V3.count()[0] - 671e9) < 1e9     # 671B without the MTP layer
    assert abs(models.QWEN3_235B.count()[0] - 235e9) < 1e9


def test_status_messages_fit_and_parse_as_untrusted():
    from xfer.rl import wire

    many = {f"inference {j}": "PeerError: " + "x" * 300 for j in range(2000)}
    b = wire.status(7, 3, 1, many)
    assert len(b) <= 8000
    v = wire.parse_status(b)
    assert v["step"] == 7 and v["rank"] == 3 and "more" in v["failed"]
    for junk in (b"", b"[]", b'{"k": "status"}', b'{"k": "x", "step": 1, "rank": 0, "failed": {}}', b"\xff"):
        with pytest.raises(ValueError):
            wire.parse_status(junk)
    e = wire.UpdateError(4, {"inference 1": "PeerError", "trainer 2": "no status"}, "trainer 0")
    assert e.inference_ranks == [1] and "inference 1 (PeerError)" in str(e)
    assert wire.imm(wire.DATA, 4096 + 5, 3) == wire.imm(wire.DATA, 5, 3)  # steps wrap at 4096
    with pytest.raises(ValueError):
        wire.imm(wire.DATA, 0, 1 << 16)


@pytest.mark.parametrize("mode", plan.MODES)
def test_data_parallel_attention_layout(mode):
    """attention="dp": everything but the routed experts whole on every rank of
    an instance, experts split. Every byte still lands once, and in the
    published design the many replicas of one tensor are spread over the
    members of its mesh (each (parameter, inference rank) pair to the member
    that has sent least) instead of one member writing every copy."""
    sh = models.trainer_shards(SMALL, 8, 4)
    tg, sizes = models.inference_targets(SMALL, 2, 2, attention="dp")
    s = plan.build(sh, tg, mode=mode, region_bytes=sizes)
    emb = [t for t in tg if t.name == "embed"]
    assert len(emb) == 4 and all(t.shape == (SMALL.vocab, SMALL.hidden) for t in emb)
    experts = {j: {t.name.split(".")[3] for t in tg if t.rank == j and ".experts." in t.name} for j in range(4)}
    assert experts[0] == experts[2] and not experts[0] & experts[1]  # EP over the instance
    sm = s.summary()
    assert sm["ingress"] == [sum(t.nbytes + t.scale_nbytes for t in tg if t.rank == j) for j in range(4)]
    mean = sum(sm["egress"]) / 8
    assert max(sm["egress"]) <= 1.5 * mean, sm["egress"]


@pytest.mark.parametrize("bad,why", [
    (dict(offset=2 * 1024 + 1), "not aligned"),
    (dict(dtype="float8_e4m3fn", scale_offset=-1), "scale_offset"),
    (dict(dtype="float8_e4m3fn", scale_offset=1 << 20 | 2), "scale_offset"),
    (dict(dtype="int3"), "unknown dtype"),
    (dict(block=0), "block"),
])
def test_planner_refuses_a_misplaced_target(bad, why):
    """The planner checks every target's placement (each destination, not only
    the first of equal contents) and names the target."""
    sh = models.trainer_shards(SMALL, 4, 2)
    tg, sizes = models.inference_targets(SMALL, 2, 2)
    i = max(j for j, t in enumerate(tg) if t.name == "embed")  # the second instance's copy of a replicated content
    fields = dict(tg[i].__dict__)
    fields.update(bad)
    tg[i] = Target(**fields)
    with pytest.raises(LayoutError, match=why) as e:
        plan.build(sh, tg, region_bytes=[1 << 30] * 4)
    assert "embed" in str(e.value) or why == "unknown dtype"
