"""The RL update simulator on small schedules: its inputs, its bounds and
its monotony (the full-scale table is docs/rl.md's, made by the CLI)."""
from __future__ import annotations

import json

from xfer.rl import models, plan, sim


def _schedule(trainers=8, node=4, instances=2, tp=2, mode="xfer"):
    sh = models.trainer_shards(models.SMALL, trainers, node)
    tg, sizes = models.inference_targets(models.SMALL, instances, tp)
    return plan.build(sh, tg, region_bytes=sizes, mode=mode)


def test_network_bound_and_breakdown():
    s = _schedule()
    inp = sim.Inputs(nic_gbps=1.0)  # a slow NIC: the inference ingress bounds the update
    r = sim.simulate(s, inp, node=4)
    ingress = max(s.summary()["ingress"])
    assert r["seconds"] >= ingress / inp.nic_Bps
    b = r["breakdown"]
    assert all(v >= 0 for v in b.values())
    assert abs(sum(b.values()) - r["seconds"]) < 1e-9  # the critical rank's stages and waits add up


def test_faster_links_never_slow_it_down():
    s = _schedule()
    times = [sim.simulate(s, sim.Inputs(nic_gbps=g), node=4)["seconds"] for g in (1, 10, 100, 400)]
    assert times == sorted(times, reverse=True)
    slow_q = sim.simulate(s, sim.Inputs(quant_GBps=0.01), node=4)["breakdown"]["quantize"]
    assert slow_q > sim.simulate(s, sim.Inputs(), node=4)["breakdown"]["quantize"]


def test_point_to_point_beats_the_funnel():
    s = _schedule(trainers=8, node=4, instances=4, tp=2)
    inp = sim.Inputs(nic_gbps=10)
    b = sim.baselines(s, inp, node=4)
    assert sim.simulate(s, inp, node=4)["seconds"] < b["ring_s"] <= b["rank0_s"] * 1.0001


def test_measured_inputs_replace_assumed_ones(tmp_path):
    (tmp_path / "engine-costs.json").write_text(json.dumps({"submit_us_p50": 2.5, "barrier_us_p50": 80.0, "provider": "shm"}))
    (tmp_path / "h200-prep.json").write_text(json.dumps({"quant_GBps": 321.0, "device": "NVIDIA H200"}))
    inp = sim.Inputs().load(str(tmp_path))
    assert (inp.submit_us, inp.barrier_us, inp.quant_GBps) == (2.5, 80.0, 321.0)
    assert inp.source["quant_GBps"].startswith("measured") and inp.source["fuse_GBps"] == "assumed"


def test_instance_rule():
    assert sim.Scenario("Kimi-K2", 256, 128).instance(models.KIMI_K2) == 16
    assert sim.Scenario("Qwen3-235B-A22B", 128, 32).instance(models.QWEN3_235B) == 4


def _layout_schedule(experts, mode):
    sh = models.trainer_shards(models.SMALL, 8, 4, experts=experts)
    tg, sizes = models.inference_targets(models.SMALL, 2, 2)
    return plan.build(sh, tg, region_bytes=sizes, mode=mode)


def test_expert_layouts_and_the_ingress_floor():
    """Experts whole per node keep the published design's full_tensor() on
    NVLink (no trainer receives gather bytes over its NIC); sharded across
    nodes they cross the network. Neither plan beats the ingress floor."""
    inp = sim.Inputs(nic_gbps=1.0, offload=True)
    ingress = {}
    for experts in models.EXPERT_LAYOUTS:
        for mode in plan.MODES:
            r = sim.simulate(_layout_schedule(experts, mode), inp, node=4)
            assert r["seconds"] >= r["ingress_floor_s"] > 0
            ingress[experts, mode] = max(g["max_trainer_ingress_GB"] for g in r["groups"])
    assert ingress["node", "published"] == 0 and ingress["across", "published"] > 0


def test_offload_charges_the_shards_that_go_to_the_gpu():
    """Offloaded shards reach the GPU before a gather or a prep reads them;
    with everything gathered (the published design) that is each rank's own
    shard of what its mesh gathers, and nothing without offload."""
    s = _layout_schedule("node", "published")
    on = sim.simulate(s, sim.Inputs(offload=True), node=4)["breakdown"]["h2d"]
    assert on > 0 and sim.simulate(s, sim.Inputs(offload=False), node=4)["breakdown"]["h2d"] == 0
    assert sim.simulate(s, sim.Inputs(offload=True, h2d_GBps=1.0), node=4)["breakdown"]["h2d"] > on


def test_qwen3_stated_inference_layout_receives_the_published_bytes():
    """The first write-up's schedule figure (Qwen3-235B, 128 -> 32) has every
    inference GPU receiving 37.688 GB: what a GPU of an 8-GPU instance holds
    with attention, embeddings and lm_head whole (data-parallel attention)
    and the experts split 8 ways, FP8 with 128 x 128 scales (docs/rl.md)."""
    for rank in (0, 5):
        tg, _ = models.rank_targets(models.QWEN3_235B, rank, 8, attention="dp")
        got = sum(t.nbytes + t.scale_nbytes for t in tg)
        assert abs(got / 1e9 - 37.688) < 0.0005, got
    tg, _ = models.rank_targets(models.QWEN3_235B, 0, 4)  # the table's rule: 4-GPU tensor-parallel instances
    assert sum(t.nbytes + t.scale_nbytes for t in tg) / 1e9 > 59


def test_stated_qwen3_setup_rows(monkeypatch):
    """The stated-setup rows run both plans at the inputs' rate and at the
    write-up's measured link rate (on a small stand-in scenario here: the
    full one is the CLI's)."""
    monkeypatch.setattr(sim, "STATED_QWEN3", sim.Scenario("small-moe", 8, 4, tp=2, node=4, experts="across",
                                                          attention="dp"))
    rows = sim.stated(sim.Inputs())
    assert [(r["mode"], r["link_GBps"] < 40) for r in rows] == [
        ("xfer", False), ("xfer", True), ("published", False), ("published", True)]
    assert abs(rows[1]["link_GBps"] - 16.133 / 0.441) < 1e-9
    assert rows[1]["seconds"] > rows[0]["seconds"] and rows[3]["seconds"] > rows[2]["seconds"]
    assert rows[2]["trainer_in_GB"] >= rows[0]["trainer_in_GB"] > 0  # experts across nodes: gather bytes in
    assert "| published design |" in sim.stated_markdown(rows)
