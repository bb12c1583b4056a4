"""Completion: the future result of one operation (and of a scatter)."""
from __future__ import annotations

import concurrent.futures
import errno as _errno
import logging
import time
from typing import TYPE_CHECKING, Any, Callable, Iterable, List, Optional

from . import _lib
from ._errors import Error, InvalidArgument, TimeoutError, error_for

if TYPE_CHECKING:
    from ._core import _Core

log = logging.getLogger("xfer")

CompletionCallback = Callable[["Completion"], Any]

OP_KINDS = {
    _lib.XFER_OP_SEND: "send",
    _lib.XFER_OP_WRITE: "write",
    _lib.XFER_OP_PAGED: "paged",
    _lib.XFER_OP_IMM: "imm",
    _lib.XFER_OP_EXPECT: "expect",
    _lib.XFER_OP_CANCEL: "cancel",
    _lib.XFER_OP_SCATTER: "scatter",
    _lib.XFER_OP_BARRIER: "barrier",
}


class Completion:
    """The future result of one operation.

    It follows :class:`concurrent.futures.Future`: :meth:`done`,
    :meth:`result`, :meth:`exception`, :meth:`add_done_callback`; on failure
    ``result()`` raises the typed :class:`xfer.Error` for the C result code.
    :attr:`future` gives a real ``concurrent.futures.Future`` (for
    ``concurrent.futures.wait``/``as_completed``) and ``await completion``
    works in asyncio. Completions cannot be cancelled one by one
    (:meth:`cancel` returns False): submit with ``tag=`` and use
    :meth:`Engine.cancel`.

    Callbacks run on the engine's reaper thread (or in whichever thread calls
    :meth:`Engine.progress` when the engine has none); keep them short.
    """

    __slots__ = ("_core", "user_data", "kind", "_res", "_done", "_keep", "_cbs", "__weakref__")

    def __init__(self, core: "_Core", user_data: int, kind: int, keep: Any = None):
        self._core = core
        self.user_data = user_data
        self.kind = kind
        self._res = 0
        self._done = False
        self._keep = keep  # buffers, regions and index arrays the C side reads until completion
        self._cbs: Optional[List[CompletionCallback]] = None

    # -- state
    def done(self) -> bool:
        """True once the operation has completed (successfully or not)."""
        return self._done

    def running(self) -> bool:
        """True while the operation is in flight."""
        return not self._done

    def cancelled(self) -> bool:
        """True if the operation completed with -ECANCELED."""
        return self._done and self._res == -_errno.ECANCELED

    def cancel(self) -> bool:
        """Always False: cancel by tag with :meth:`Engine.cancel`."""
        return False

    @property
    def res(self) -> Optional[int]:
        """The raw C result (0, a count, or -errno); None while in flight."""
        return self._res if self._done else None

    @property
    def kind_name(self) -> str:
        return OP_KINDS.get(self.kind, str(self.kind))

    # -- waiting
    def wait(self, timeout: Optional[float] = None) -> bool:
        """Blocks until done or ``timeout`` seconds pass; returns :meth:`done`."""
        if self._done:
            return True
        return self._core.wait_for(self, timeout)

    def result(self, timeout: Optional[float] = None) -> int:
        """Waits, then returns the result (0; a count for :meth:`Engine.cancel`) or raises.

        Raises :class:`xfer.TimeoutError` (a builtin ``TimeoutError`` too) if
        ``timeout`` seconds pass first — the operation itself goes on.
        """
        if not self._done and not self._core.wait_for(self, timeout):
            raise TimeoutError(_errno.ETIMEDOUT, f"{self.kind_name} not complete after {timeout} s", "wait")
        if self._res < 0:
            raise error_for(self._res, self.kind_name)
        return self._res

    def exception(self, timeout: Optional[float] = None) -> Optional[Error]:
        """Waits like :meth:`result`, returns the error (or None) instead of raising it."""
        if not self._done and not self._core.wait_for(self, timeout):
            raise TimeoutError(_errno.ETIMEDOUT, f"{self.kind_name} not complete after {timeout} s", "wait")
        return error_for(self._res, self.kind_name) if self._res < 0 else None

    def add_done_callback(self, fn: CompletionCallback) -> None:
        """Calls ``fn(self)`` once done (at once, in this thread, if already done)."""
        with self._core.cb_lock:
            if not self._done:
                if self._cbs is None:
                    self._cbs = [fn]
                else:
                    self._cbs.append(fn)
                return
        _run_callback(fn, self)

    @property
    def future(self) -> "concurrent.futures.Future[int]":
        """A ``concurrent.futures.Future`` that completes with this operation."""
        f: concurrent.futures.Future = concurrent.futures.Future()
        f.set_running_or_notify_cancel()

        def relay(c: Completion) -> None:
            if c._res < 0:
                f.set_exception(error_for(c._res, c.kind_name))
            else:
                f.set_result(c._res)

        self.add_done_callback(relay)
        return f

    def __await__(self):
        import asyncio

        return asyncio.wrap_future(self.future).__await__()

    def __repr__(self) -> str:
        state = f"res={self._res}" if self._done else "pending"
        return f"<xfer.Completion {self.kind_name} #{self.user_data} {state}>"


def _run_callback(fn: CompletionCallback, c: Completion) -> None:
    try:
        fn(c)
    except Exception:  # noqa: BLE001 - like concurrent.futures: log, never propagate
        log.exception("xfer: exception in completion callback %r for %r", fn, c)


def wait(completions: Iterable[Completion], timeout: Optional[float] = None) -> None:
    """Waits for every completion; raises the first failure, or TimeoutError after ``timeout`` s."""
    deadline = None if timeout is None else time.monotonic() + timeout
    for c in completions:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        c.result(left)


class ScatterCompletion(Completion):
    """The completion of :meth:`Engine.scatter`: the first error of its
    entries, and each entry's own result in :attr:`statuses`."""

    __slots__ = ("_status",)

    def __init__(self, core: "_Core", user_data: int, keep: Any, status: Any):
        super().__init__(core, user_data, _lib.XFER_OP_SCATTER, keep)
        self._status = status

    @property
    def statuses(self) -> Optional[List[int]]:
        """Each entry's result (0 or -errno), filled by the library before the
        completion; None while in flight or when submitted with ``status=False``."""
        if not self._done or self._status is None:
            return None
        return list(self._status)

    def entry_errors(self, timeout: Optional[float] = None) -> List[Optional[Error]]:
        """Waits like :meth:`result`, then returns each entry's error (None where it succeeded)."""
        if not self._done and not self._core.wait_for(self, timeout):
            raise TimeoutError(_errno.ETIMEDOUT, f"scatter not complete after {timeout} s", "wait")
        if self._status is None:
            raise InvalidArgument(_errno.EINVAL, "submitted with status=False", "entry_errors")
        return [error_for(r, "scatter entry") if r < 0 else None for r in self._status]
