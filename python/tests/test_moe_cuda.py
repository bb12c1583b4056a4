"""xfer.moe on a GPU: 2 and 4 ranks as processes sharing the GPU(s) here,
through the same-host path (CUDA IPC between the kernels), the engine path
(every rank remote: staged over tcp, XFER_GPU_IPC=0), and both at once
(hosts of two ranks); fp8 with scales quantized by the kernel; the halves
split; a CUDA graph replayed. Every expert row and combined token is checked
against the torch reference. Skipped, with the reason, without CUDA or
without libxfer_moe_cuda.so. scripts/device-moe.sh runs the same checks
one by one with a log each."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="xfer.moe needs PyTorch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device here: the MoE GPU path is tested on a GPU machine "
                "(scripts/device-moe.sh)", allow_module_level=True)

from xfer import _moe_lib  # noqa: E402

try:
    _moe_lib.cuda_lib()
except Exception as ex:  # noqa: BLE001
    pytest.skip(str(ex), allow_module_level=True)

from moe_ranks import run_ranks  # noqa: E402

MODES = {
    "ipc": {},
    "engine": {"same_host": False},
    "mixed": {"host_of": [0, 0, 1, 1]},
}


def spec(world, mode, **kw):
    s = dict(world=world, experts=8 * world, topk=6 if world > 2 else 4, hidden=256, max_tokens=32,
             rounds=12, private_tokens=4, provider="tcp", device="cuda", timeout_ms=20000)
    s.update(MODES[mode])
    s.update(kw)
    return s


@pytest.fixture(autouse=True)
def _no_engine_ipc(monkeypatch):
    # The engine path must really go through the NICs (staged), not the
    # engine's own CUDA IPC shortcut between processes of one host.
    monkeypatch.setenv("XFER_GPU_IPC", "0")


@pytest.mark.parametrize("world,mode", [(2, "ipc"), (2, "engine"), (4, "ipc"), (4, "engine"), (4, "mixed")])
def test_rounds(world, mode):
    res = run_ranks(world, "check_many", spec(world, mode, scenarios=[
        ("check_rounds", {}), ("check_rounds", {"fp8": True, "split": True, "rounds": 8})]))
    assert all(r[0]["rounds"] == 12 for r in res)


@pytest.mark.parametrize("wait", ["kernel", "stream"])
def test_wait_modes(wait):
    run_ranks(2, "check_rounds", spec(2, "ipc", gpu_wait=wait, rounds=8))


@pytest.mark.parametrize("mode", ["ipc", "engine"])
def test_graph(mode):
    run_ranks(2, "check_graph", spec(2, mode))
