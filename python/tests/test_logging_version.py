"""The library's log lines in the logging module, and one version everywhere."""
from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import xfer
from xfer import _lib
from conftest import make_engine

pytestmark = pytest.mark.local

PKG_DIR = Path(xfer.__file__).resolve().parent
HEADER = Path(os.environ.get("XFER_INCLUDE_DIR", PKG_DIR.parent.parent / "include")) / "xfer.h"


def test_warning_from_the_calling_thread(caplog, monkeypatch) -> None:
    assert xfer.logs_routed()
    monkeypatch.setenv("XFER_SUBMIT_DEPTH", "lots")
    with caplog.at_level(logging.WARNING, logger="xfer"):
        _lib.defaults()  # xfer_attr_init warns about the variable
    recs = [r for r in caplog.records if r.name == "xfer" and "XFER_SUBMIT_DEPTH=lots" in r.getMessage()]
    assert recs and recs[0].levelno == logging.WARNING, caplog.records
    assert not recs[0].getMessage().startswith("xfer["), "the C prefix belongs to stderr only"


def test_info_from_the_worker_thread(caplog) -> None:
    with caplog.at_level(logging.DEBUG, logger="xfer"):
        with make_engine("tcp", log_level=2):  # info: the worker reports each NIC it opens
            pass
    recs = [r for r in caplog.records if r.name == "xfer" and r.getMessage().startswith("NIC 0:")]
    assert recs and recs[0].levelno == logging.INFO, [r.getMessage() for r in caplog.records]
    assert recs[0].thread != threading.main_thread().ident, "expected the worker's line"


def _python(code: str, env_extra: dict) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(PKG_DIR.parent), **env_extra)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)


def test_route_logs_off_writes_stderr_as_c_does() -> None:
    code = "import xfer; xfer.route_logs({}); xfer._lib.defaults()"
    on = _python(code.format("True"), {"XFER_LOG_LEVEL": "chatty"})
    off = _python(code.format("False"), {"XFER_LOG_LEVEL": "chatty"})
    assert on.returncode == 0 and off.returncode == 0, (on.stderr, off.stderr)
    # Routed, with no logging configured: Python's last-resort handler prints the message.
    assert "ignoring XFER_LOG_LEVEL=chatty" in on.stderr and "xfer[" not in on.stderr, on.stderr
    assert re.search(r"xfer\[\d+\] warn: ignoring XFER_LOG_LEVEL=chatty", off.stderr), off.stderr


def test_versions_agree() -> None:
    assert xfer.__version__ == xfer.LIBRARY_VERSION == _lib.xfer_version().decode()
    if HEADER.exists():
        text = HEADER.read_text()
        parts = [re.search(rf"#define XFER_VERSION_{p} (\d+)", text).group(1) for p in ("MAJOR", "MINOR", "PATCH")]
        assert ".".join(parts) == xfer.__version__


def test_a_library_of_another_version_is_refused(tmp_path: Path) -> None:
    pkg = tmp_path / "xfer"
    shutil.copytree(PKG_DIR, pkg, ignore=shutil.ignore_patterns("__pycache__", "lib"))
    (pkg / "_version.py").write_text('__version__ = "9.8.7"\n')
    env = dict(os.environ, PYTHONPATH=str(tmp_path), XFER_LIBRARY=xfer.LIBRARY_PATH)
    r = subprocess.run([sys.executable, "-c", "import xfer"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert f"libxfer {xfer.LIBRARY_VERSION}, this binding is 9.8.7" in r.stderr, r.stderr
