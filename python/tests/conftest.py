"""Shared fixtures. Providers come from $XFER_TEST_PROVIDERS (default "shm,tcp")."""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # remote.py
sys.path.insert(1, os.path.dirname(HERE))  # the xfer package of this source tree

try:
    import numpy  # noqa: F401
except ImportError:  # fail loudly: the suite cannot say anything without it
    pytest.exit("the xfer Python tests need numpy: `python3 -m pip install numpy pytest`", returncode=3)

import xfer  # noqa: E402  (a missing libxfer fails here, loudly)
from remote import Remote, engine_kwargs  # noqa: E402

PROVIDERS = [p for p in os.environ.get("XFER_TEST_PROVIDERS", "shm,tcp").split(",") if p]


def pytest_configure(config: Any) -> None:
    config.addinivalue_line("markers", "pair: runs against a second process, once per provider")
    config.addinivalue_line("markers", "local: runs inside the test process only")
    config.addinivalue_line("markers", "rl: the RL weight-update demo (trainer and inference processes)")
    config.addinivalue_line("markers", "gpu: needs CUDA (skipped without it)")


def pytest_report_header(config: Any) -> str:
    return f"xfer library: {xfer.LIBRARY_PATH}; providers: {','.join(PROVIDERS)}"


def make_engine(provider: str, **kw: Any) -> xfer.Engine:
    try:
        return xfer.Engine(**{**engine_kwargs(provider), **kw})
    except (xfer.NoProvider, xfer.NotFound) as ex:
        pytest.skip(f"provider {provider} is not available here: {ex}")


@dataclass
class Pair:
    provider: str
    engine: xfer.Engine
    remote: Remote
    peer: xfer.Peer


@pytest.fixture(scope="module", params=PROVIDERS)
def pair(request: Any):
    provider = request.param
    eng = make_engine(provider, heartbeat_ms=0)
    remote = Remote(provider)
    try:
        peer = remote.connect(eng)
        yield Pair(provider, eng, remote, peer)
    finally:
        remote.close()
        eng.close()


@pytest.fixture(params=PROVIDERS)
def provider(request: Any) -> str:
    return request.param
