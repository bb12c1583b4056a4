"""The GPU-progress watcher (``xfer_watcher_*``) with a Python callback.

libxfer's watcher thread polls a 64-bit word and calls back with (old, new)
when it changes. Here that callback is a ctypes trampoline: ctypes takes the
GIL for it (the thread is not Python's), the trampoline runs the user's
function and keeps whatever it raises, so that nothing ever unwinds into C.

Lifetime rules the code below keeps:

* The trampoline refers to a ``_State``, never to the Watcher, so a Watcher
  dropped without ``close()`` can be collected and its finalizer destroy
  the C watcher. The state holds the CFUNCTYPE object until the C thread
  has been joined: freeing it earlier would leave C calling freed code.
* ``xfer_watcher_destroy`` joins the watcher thread. It is called through a
  handle that releases the GIL (the thread may be waiting for the GIL), and
  never from the watcher thread itself (a thread cannot join itself): there
  a helper thread does it.
* The word is freed by that destroy. While a CUDA tensor view of it
  (:meth:`Watcher.tensor`) is alive, a kernel may still store into it, so
  ``close()`` then stops the callbacks at once but leaves the destroy to
  the last view's finalizer.
* At interpreter exit every watcher still alive is destroyed (before the
  engines, whose finalizers run later), so that no C thread calls into a
  finalizing interpreter.
"""
from __future__ import annotations

import atexit
import errno as _errno
import logging
import os
import threading
import weakref
from ctypes import byref, c_uint64, c_void_p
from typing import Any, Callable, List, Optional

from . import _lib
from ._errors import InvalidArgument, NoGPU, check, wrong_type
from ._mapped import cuda_tensor

log = logging.getLogger("xfer")

WatchCallback = Callable[[int, int], Any]

_U64_MASK = (1 << 64) - 1
_ERRORS_KEPT = 16  # the first ones: later ones are counted and logged


class _State:
    """What the C thread's callback and the finalizers share."""

    __slots__ = (
        "fn", "h", "cfunc", "closed", "thread_id", "calls", "errors", "error_count",
        "raised", "views", "lock", "pid", "__weakref__",
    )

    def __init__(self, fn: WatchCallback):
        self.fn = fn
        self.h: Optional[int] = None  # the C watcher until destroyed
        self.cfunc: Any = None  # the CFUNCTYPE object C calls, until the thread is joined
        self.closed = False  # no user callback runs once this is set
        self.thread_id: Optional[int] = None  # the watcher thread, once it has called back
        self.calls = 0
        self.errors: List[BaseException] = []
        self.error_count = 0
        self.raised = False
        self.views = 0  # live CUDA tensor views of the word
        self.lock = threading.Lock()
        self.pid = os.getpid()  # a forked child has the struct but no thread to join

    def failed(self, ex: BaseException, old: int, new: int) -> None:
        self.error_count += 1
        if len(self.errors) < _ERRORS_KEPT:
            self.errors.append(ex)
        log.error("xfer: exception in watcher callback %r for (%d, %d)", self.fn, old, new, exc_info=ex)


def _trampoline(st: _State) -> Any:
    def call(_ctx: Any, old: int, new: int) -> None:
        if st.thread_id is None:
            st.thread_id = threading.get_ident()
        if st.closed:
            return
        st.calls += 1
        try:
            st.fn(old, new)
        except BaseException as ex:  # noqa: BLE001 - nothing may unwind into the C thread
            st.failed(ex, old, new)

    return _lib.xfer_watch_fn(call)


# Watchers not destroyed yet (their states), and helper threads destroying
# some: interpreter exit finishes both.
_live: "set[_State]" = set()
_helpers: "set[threading.Thread]" = set()
_exit_hook = False


def _join_and_free(h: int, st: _State) -> None:
    _lib.xfer_watcher_destroy(h)
    st.cfunc = None  # the thread is gone: nothing calls it any more
    _live.discard(st)


def _helper(h: int, st: _State) -> None:
    try:
        _join_and_free(h, st)
    finally:
        _helpers.discard(threading.current_thread())


def _destroy(st: _State, *, force: bool = False, defer: bool = False) -> None:
    """Stops the callbacks now; destroys the C watcher unless a view still
    needs its word (``force``: regardless). ``defer``: on a helper thread."""
    with st.lock:
        st.closed = True
        if st.h is None or (st.views and not force):
            return
        h, st.h = st.h, None
    if os.getpid() != st.pid:
        _live.discard(st)
        return
    if defer or threading.get_ident() == st.thread_id:
        t = threading.Thread(target=_helper, args=(h, st), name="xfer-watcher-destroy", daemon=True)
        _helpers.add(t)
        t.start()
    else:
        _join_and_free(h, st)


def _view_gone(st: _State) -> None:
    # A finalizer: it may run on any thread, the watcher's included, and
    # while that thread holds locks a callback needs. Never join here.
    with st.lock:
        st.views -= 1
        last = st.views == 0 and st.closed
    if last:
        _destroy(st, defer=True)


def _at_exit() -> None:
    for st in list(_live):
        _destroy(st, force=True)
    for t in list(_helpers):
        t.join(5)


def _hook_exit() -> None:
    # Registered once a weakref.finalize exists, so after weakref's own atexit
    # hook (which closes the engines): atexit runs hooks last-in first-out,
    # so the watchers (whose callbacks submit) stop before the engines close.
    global _exit_hook
    if not _exit_hook:
        _exit_hook = True
        atexit.register(_at_exit)


#: ``spin_us`` of a watcher that never sleeps (``XFER_SPIN_FOREVER``): spin mode.
SPIN_FOREVER = 0xFFFFFFFF


class Watcher:
    """A 64-bit word that a GPU kernel (or any thread) bumps, and a thread
    that calls ``callback(old, new)`` whenever it changes (``xfer_watcher_*``).

    With CUDA the word is pinned host memory mapped into the GPU
    (:attr:`device_ptr`, :meth:`tensor`); without it, plain host memory and
    ``device_ptr == 0`` — the watcher works the same for CPU producers.
    The word starts at 0; changes between two polls are coalesced into one
    call (a jump from 3 to 7 is one call, (3, 7)). ``spin_us`` picks the
    thread's mode (docs/api.md §11): None or 0, the library's default (spin
    mode, never sleeping on a core of its own, for a word mapped into a GPU;
    hybrid with a 1000 µs window otherwise); :data:`SPIN_FOREVER`, spin
    mode; any other value, hybrid: poll that long after a change, then nap
    about 10 µs between polls.

    The callback runs on the watcher's own thread, holding the GIL; it may
    submit operations (e.g. a layer's paged writes). Whatever it raises is
    logged on the ``xfer`` logger and kept in :attr:`errors`; :meth:`close`
    raises the first of them. Use it as a context manager, or call
    :meth:`close`; keep it open while a kernel or captured CUDA graph may
    still bump the word.
    """

    def __init__(self, callback: WatchCallback, *, spin_us: Optional[int] = None):
        if not callable(callback):
            raise wrong_type("callback", "callable as callback(old, new)", callback, "xfer_watcher_create")
        if spin_us is not None and (not isinstance(spin_us, int) or isinstance(spin_us, bool) or not 0 <= spin_us <= 0xFFFFFFFF):
            raise InvalidArgument(_errno.EINVAL, f"spin_us must be an int in 0 .. 2^32-1, not {spin_us!r}", "xfer_watcher_create")
        st = _State(callback)
        st.cfunc = _trampoline(st)
        out = c_void_p()
        check(_lib.xfer_watcher_create(st.cfunc, None, spin_us or 0, byref(out)), "xfer_watcher_create")
        h = int(out.value or 0)
        st.h = h
        _live.add(st)
        self._st = st
        #: As given (0: the library's default mode, see above).
        self.spin_us: int = spin_us or 0
        #: Host address of the word (``xfer_watcher_word``); freed by close().
        self.word: int = int(_lib.xfer_watcher_word(h) or 0)
        #: Device address of the word (``xfer_watcher_device_ptr``); 0 without CUDA.
        self.device_ptr: int = int(_lib.xfer_watcher_device_ptr(h))
        self._word = c_uint64.from_address(self.word)
        # Collected without close(): destroyed on a helper thread, since the
        # collection may happen anywhere, e.g. where a lock the callback
        # waits for is held.
        self._fin = weakref.finalize(self, _destroy, st, defer=True)
        self._fin.atexit = False  # _at_exit does it, in the right order
        _hook_exit()  # after the first weakref.finalize: see _hook_exit

    # -- the word
    @property
    def mapped(self) -> bool:
        """True when a GPU can store into the word (CUDA was usable at creation)."""
        return self.device_ptr != 0

    # The host accesses below hold the state's lock: close() on another
    # thread frees the word as soon as it has marked the state closed (under
    # that lock), so a store that passed the check must be over by then.
    @property
    def value(self) -> int:
        """The word now."""
        with self._st.lock:
            self._usable("value")
            return self._word.value

    def set(self, value: int) -> None:
        """Stores ``value`` in the word from the host: the callback sees the change."""
        if not isinstance(value, int) or not 0 <= value <= _U64_MASK:
            raise InvalidArgument(_errno.EINVAL, f"the word holds an unsigned 64-bit int, not {value!r}", "Watcher.set")
        with self._st.lock:
            self._usable("set")
            self._word.value = value

    def bump(self, n: int = 1) -> int:
        """Adds ``n`` to the word from the host and returns the new value.

        Not atomic against producers other than this method (a GPU kernel):
        one producer per word, as one GPU stream bumping it per layer is."""
        n = int(n)
        with self._st.lock:
            self._usable("bump")
            v = (self._word.value + n) & _U64_MASK
            self._word.value = v
        return v

    def tensor(self, device: Any = None) -> Any:
        """The word as a 1-element int64 CUDA tensor (torch) over
        :attr:`device_ptr`: ``t.add_(1)`` on it is a kernel that bumps the
        word, in eager mode or captured in a CUDA graph, in stream order
        after the work it announces. ``device`` (default: torch's current
        CUDA device) is the GPU the tensor is on, whose streams run its ops:
        the mapped word has the same address on every GPU.

        While the tensor lives, :meth:`close` stops the callbacks but frees
        the word only once the tensor is gone — a graph captured with it must
        not replay after that. Raises :class:`xfer.NoGPU` when the word is not
        mapped, :class:`xfer.NotSupported` without torch."""
        self._usable("tensor")
        if not self.device_ptr:
            raise NoGPU(
                _lib.XFER_ENOGPU,
                "the watcher's word is not mapped into a GPU (libxfer found no usable CUDA driver and device)",
                "Watcher.tensor",
            )
        st = self._st
        t, holder = cuda_tensor(self.device_ptr, 1, st, "Watcher.tensor", device)
        with st.lock:
            st.views += 1
        weakref.finalize(holder, _view_gone, st)
        return t

    # -- callbacks and their failures
    @property
    def calls(self) -> int:
        """How many times the callback has been called."""
        return self._st.calls

    @property
    def errors(self) -> List[BaseException]:
        """The exceptions the callback raised (the first 16), oldest first."""
        return list(self._st.errors)

    @property
    def error_count(self) -> int:
        """How many times the callback raised."""
        return self._st.error_count

    # -- lifecycle
    @property
    def closed(self) -> bool:
        return self._st.closed

    def close(self) -> None:
        """Stops the callbacks and destroys the watcher (``xfer_watcher_destroy``):
        once this returns no callback runs any more. Then raises the first
        exception the callback raised, if any, once.

        From inside the callback it returns at once: no later callback runs,
        and a helper thread joins the watcher thread when this call returns
        (a thread cannot join itself). Do not call it while holding a lock
        the callback waits for. Idempotent."""
        self._close(raise_errors=True)

    def _close(self, raise_errors: bool) -> None:
        st = self._st
        self._fin.detach()
        own_thread = threading.get_ident() == st.thread_id
        _destroy(st)
        if raise_errors and not own_thread and st.errors and not st.raised:
            st.raised = True
            first = st.errors[0]
            if st.error_count > 1 and hasattr(first, "add_note"):
                first.add_note(f"xfer.Watcher: the first of {st.error_count} exceptions the callback raised (see .errors)")
            raise first

    def _usable(self, what: str) -> None:
        if self._st.closed:
            raise InvalidArgument(_errno.EINVAL, "the watcher is closed", f"Watcher.{what}")

    def __enter__(self) -> "Watcher":
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        # An exception leaving the with block is not masked by the callback's.
        self._close(raise_errors=exc_type is None)

    def __repr__(self) -> str:
        st = self._st
        with st.lock:
            state = "closed" if st.closed else f"word {self._word.value}"
        where = f"mapped at {self.device_ptr:#x}" if self.device_ptr else "host memory"
        return f"<xfer.Watcher {state}, {where}, {st.calls} calls, {st.error_count} errors>"

