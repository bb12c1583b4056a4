"""Receiving SENDs: blocking waits in slices, and the on_recv thread."""
from __future__ import annotations

import ctypes
import errno as _errno
import logging
import time
import weakref
from ctypes import addressof, byref
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Optional

from . import _lib
from ._core import _E_TIMEDOUT, _WAIT_SLICE_S
from ._errors import Error, Shutdown, TimeoutError, error_for

if TYPE_CHECKING:
    from ._core import _Core
    from ._engine import Engine
    from ._peer import Peer

log = logging.getLogger("xfer")
_string_at = ctypes.string_at


class Message(NamedTuple):
    """A received SEND: its bytes, the sender's engine id and, if known here, its Peer."""

    data: bytes
    src_id: int
    peer: Optional["Peer"]


def recv_raw(core: "_Core", ptr: int, cap: int, info: Any, timeout: Optional[float]) -> None:
    deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
    while True:
        if deadline is None:
            ms = int(_WAIT_SLICE_S * 1000)
        else:
            left = deadline - time.monotonic()
            ms = max(0, int(min(left, _WAIT_SLICE_S) * 1000))
        if ms == 0:
            rc = _lib.xfer_recv(core.h, ptr, cap, byref(info))
            if rc == 0:
                rc = _E_TIMEDOUT
        else:
            rc = _lib.xfer_recv_wait(core.h, ptr, cap, byref(info), ms)
        if rc > 0:
            return
        if rc != _E_TIMEDOUT:
            raise error_for(rc, "xfer_recv")
        if core.closed:
            raise Shutdown(_errno.ESHUTDOWN, None, "xfer_recv")
        if deadline is not None and time.monotonic() >= deadline:
            raise TimeoutError(_errno.ETIMEDOUT, f"no message within {timeout} s", "xfer_recv")


def recv(core: "_Core", msg_max: int, timeout: Optional[float]) -> Message:
    buf = ctypes.create_string_buffer(max(1, msg_max))
    info = _lib.xfer_msg_info()
    recv_raw(core, addressof(buf), msg_max, info, timeout)
    n = min(int(info.len), msg_max)
    ref = core.peers_by_id.get(info.src_id)
    return Message(_string_at(buf, n), int(info.src_id), ref() if ref is not None else None)


def receiver_main(engine_ref: "weakref.ref[Engine]", core: "_Core", fn: Callable[[Message], Any]) -> None:
    msg_max = engine_ref().msg_max if engine_ref() is not None else 65536  # type: ignore[union-attr]
    while not core.stopping:
        try:
            m = recv(core, msg_max, _WAIT_SLICE_S)
        except TimeoutError:
            continue
        except Shutdown:
            break
        except Error as ex:
            if core.stopping:
                break
            log.error("xfer: receive failed: %s", ex)
            time.sleep(0.01)
            continue
        try:
            fn(m)
        except Exception:  # noqa: BLE001
            log.exception("xfer: exception in on_recv callback")
