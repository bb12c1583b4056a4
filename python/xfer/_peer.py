"""Peers (remote engines), groups of them, and scatter entries."""
from __future__ import annotations

import errno as _errno
import os
import weakref
from typing import TYPE_CHECKING, Any, Iterable, List, NamedTuple, Optional, Tuple, Union

from . import _lib
from ._completion import Completion, ScatterCompletion
from ._errors import InvalidArgument, check, error_for
from ._region import RemoteRegion

if TYPE_CHECKING:
    from ._core import _Core
    from ._engine import BytesLike, Engine
    from ._region import Region


class Peer:
    """A remote engine added with :meth:`Engine.add_peer`."""

    __slots__ = ("_core", "engine", "index", "id", "_removed", "__weakref__")

    def __init__(self, engine: "Engine", index: int):
        self._core = engine._core
        self.engine = engine
        self.index = index
        self.id = int(_lib.xfer_peer_id(self._core.h, index))
        self._removed = False

    @property
    def state(self) -> str:
        """``xfer_peer_state``: ``"live"``; ``"dead"`` once the engine declared it
        failed (its probes failed or went unanswered for ``heartbeat_ms *
        heartbeat_misses``): pending operations to it completed with
        :class:`xfer.PeerError`, new ones raise it at once, until it is
        removed; or ``"removed"``."""
        if self._removed:
            return "removed"
        s = _lib.xfer_peer_state(self._core.h, self.index)
        return {_lib.XFER_PEER_LIVE: "live", _lib.XFER_PEER_DEAD: "dead"}.get(s, "removed")

    @property
    def alive(self) -> bool:
        """``state == "live"``."""
        return self.state == "live"

    @property
    def shards(self) -> int:
        """``xfer_peer_shards``: how many times one sharded write
        (``flags=xfer.F_SHARD``) to this peer delivers its immediate —
        min(our NIC count, the peer's); 0 once removed."""
        if self._removed:
            return 0
        return int(_lib.xfer_peer_shards(self._core.h, self.index))

    def import_region(self, descriptor: BytesLike) -> RemoteRegion:
        return self.engine.import_region(self, descriptor)

    def send(self, data: Any, **kw: Any) -> Completion:
        return self.engine.send(self, data, **kw)

    def write_imm(self, imm: int, **kw: Any) -> Completion:
        return self.engine.write_imm(self, imm, **kw)

    def remove(self) -> None:
        """Forgets the peer; :class:`xfer.Busy` while operations to it are in flight."""
        if self._removed:
            return
        core = self._core
        with core.ctl:
            check(_lib.xfer_peer_remove(core.h, self.index), "xfer_peer_remove")
            self._removed = True
            ref = core.peers_by_id.get(self.id)
            if ref is not None and ref() is self:
                del core.peers_by_id[self.id]
            core.peers.pop(self.index, None)
            core.down_reported.discard(self.index)

    def __repr__(self) -> str:
        return f"<xfer.Peer {self.index} id={self.id:016x}>"


class Group:
    """A fixed set of peers for :meth:`Engine.scatter` and :meth:`Engine.barrier`
    (``xfer_group_create``), made by :meth:`Engine.group`.

    ``members`` lists its peers in order: a scatter entry names its target by
    index into it. ``len(group)`` is ``xfer_group_size``. Close it (or use it
    as a context manager) to free it — :class:`xfer.Busy` while a scatter or
    barrier on it is in flight; a collected group frees itself.
    """

    __slots__ = ("_core", "_h", "_fin", "_lingering", "engine", "members", "__weakref__")

    def __init__(self, engine: "Engine", h: int, members: List["Peer"]):
        self._core = engine._core
        self._h: Optional[int] = h
        self.engine = engine
        self.members: Tuple[Peer, ...] = tuple(members)
        # Arrays of scatters that completed early (deadline): the worker may
        # still write their status and read their entries until it drains
        # them, which is over once the group can be destroyed.
        self._lingering: List[Any] = []
        self._fin = weakref.finalize(self, _group_gone, self._core, h, self._lingering)
        self._fin.atexit = False

    @property
    def closed(self) -> bool:
        return self._h is None

    @property
    def size(self) -> int:
        """``xfer_group_size``: how many members (each expects this many arrivals
        when every member barriers on the same immediate)."""
        h = self._h
        return int(_lib.xfer_group_size(h)) if h is not None else len(self.members)

    def __len__(self) -> int:
        return self.size

    def index(self, peer: "Peer") -> int:
        """The member index of ``peer`` (its first occurrence)."""
        for i, p in enumerate(self.members):
            if p is peer:
                return i
        raise InvalidArgument(_errno.EINVAL, f"{peer!r} is not a member of this group", "xfer_scatter")

    def scatter(self, src: Optional["Region"], entries: Iterable[Any], **kw: Any) -> "ScatterCompletion":
        """:meth:`Engine.scatter` on this group."""
        return self.engine.scatter(self, src, entries, **kw)

    def barrier(self, imm: int, **kw: Any) -> Completion:
        """:meth:`Engine.barrier` on this group."""
        return self.engine.barrier(self, imm, **kw)

    def close(self) -> None:
        """Frees the group (idempotent). Raises :class:`xfer.Busy` while a
        scatter or barrier on it is in flight."""
        h = self._h
        if h is None:
            return
        with self._core.ctl:
            rc = _lib.xfer_group_destroy(h)
            if rc < 0:
                raise error_for(rc, "xfer_group_destroy")
            self._fin.detach()
            self._h = None
            self._lingering.clear()

    def __enter__(self) -> "Group":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = " closed" if self._h is None else ""
        return f"<xfer.Group of {len(self.members)} peers{state}>"


def _group_gone(core: "_Core", h: int, lingering: List[Any]) -> None:
    """A Group was collected without close(): free it, or keep what its
    scatters still use until the worker lets it go."""
    if os.getpid() != core.pid:
        return
    with core.ctl:
        if _lib.xfer_group_destroy(h) == -_errno.EBUSY:
            core.zombie_groups.append((h, lingering))


class ScatterEntry(NamedTuple):
    """One slice of a scatter: ``nbytes`` from ``src_offset`` of the source
    region to ``dst_offset`` of ``dst``, a region of group member ``member``
    (its index in ``Group.members``, or the Peer itself). ``nbytes`` 0
    delivers only the immediate."""

    member: Union[int, "Peer"]
    dst: "RemoteRegion"
    nbytes: int
    src_offset: int = 0
    dst_offset: int = 0
