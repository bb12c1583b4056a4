"""Arguments are checked before a handle or an integer reaches the library.

A local Region where a RemoteRegion belongs used to reach xfer_write as the
wrong handle (the interpreter crashed); an engine attribute or a field that
does not fit its C type used to wrap silently (msg_max=2**40 became 0,
timeout_ms=2**64+5 became 5 ms). Now the wrong type raises a TypeError
(xfer.ArgumentTypeError, also an InvalidArgument) naming both types, and an
int out of range a ValueError (xfer.InvalidArgument) naming the argument and
its range, before anything is submitted.
"""
from __future__ import annotations

from typing import Any, Iterator

import numpy as np
import pytest

import xfer
from xfer import kv
from conftest import make_engine
from remote import engine_kwargs

pytestmark = pytest.mark.local

LOCAL = "tcp"


class Pair:
    def __init__(self) -> None:
        self.a = make_engine(LOCAL)
        self.b = make_engine(LOCAL)
        self.peer = self.a.add_peer(self.b.address)
        self.b.add_peer(self.a.address)
        self.src = self.a.register(np.zeros(4096, np.uint8))
        self.local_dst = self.b.register(np.zeros(4096, np.uint8))
        self.dst = self.a.import_region(self.peer, self.local_dst.descriptor)
        self.group = self.a.group([self.peer])

    def close(self) -> None:
        self.a.close()
        self.b.close()


@pytest.fixture(scope="module")
def two() -> Iterator[Pair]:
    p = Pair()
    yield p
    p.close()


def _type_error(match: str) -> Any:
    return pytest.raises(TypeError, match=match)


def test_wrong_region_kinds_raise_type_errors(two: Pair) -> None:
    a, src, dst, ldst = two.a, two.src, two.dst, two.local_dst
    idx = np.arange(2, dtype=np.uint32)
    # A local Region as the destination: the crash of issue 13 item 7.
    with _type_error("dst must be a RemoteRegion .*import_region.*not Region") as ei:
        a.write(src, ldst, 16)
    assert isinstance(ei.value, xfer.ArgumentTypeError) and isinstance(ei.value, xfer.InvalidArgument)
    with _type_error("dst must be a RemoteRegion"):
        a.write(src, src, 16)
    with _type_error("dst must be a RemoteRegion"):
        a.write_paged(src, ldst, idx, idx, 64)
    with _type_error("src must be a Region or None, not RemoteRegion"):
        a.write(dst, dst, 16)
    with _type_error("src must be a Region, not RemoteRegion"):
        a.write_paged(dst, dst, idx, idx, 64)
    with _type_error("src must be a Region, not NoneType"):
        a.write_paged(None, dst, idx, idx, 64)  # type: ignore[arg-type]
    with _type_error("dst must be a RemoteRegion, not str"):
        a.write(src, "region")  # type: ignore[arg-type]
    with _type_error(r"entry 0: dst must be a RemoteRegion, not Region"):
        a.scatter(two.group, src, [(0, ldst, 16)])
    with _type_error("src must be a Region or None, not RemoteRegion"):
        a.scatter(two.group, dst, [(0, dst, 16)])  # type: ignore[arg-type]
    assert a.pending_count == 0
    # The right kinds still work after all that.
    exp = two.b.expect_imm(5, 1)
    a.write(src, dst, 16, imm=5).result(10)
    exp.result(10)


def test_wrong_peer_and_group_kinds(two: Pair) -> None:
    a = two.a
    with _type_error("peer must be a Peer, not int"):
        a.write_imm(0, 1)  # type: ignore[arg-type]
    with _type_error("peer must be a Peer, not RemoteRegion"):
        a.send(two.dst, b"x")  # type: ignore[arg-type]
    with _type_error("peer must be a Peer, not str"):
        a.import_region("peer", two.local_dst.descriptor)  # type: ignore[arg-type]
    with _type_error("descriptor must be bytes, not Region"):
        a.import_region(two.peer, two.local_dst)  # type: ignore[arg-type]
    with _type_error("address must be bytes, not str"):
        a.add_peer("address")  # type: ignore[arg-type]
    with _type_error("a group member must be a Peer, not int"):
        a.group([two.peer, 3])  # type: ignore[list-item]
    with _type_error("group must be a Group, not Peer"):
        a.barrier(two.peer, 1)  # type: ignore[arg-type]
    with _type_error("group must be a Group, not list"):
        a.scatter([two.peer], two.src, [])  # type: ignore[arg-type]
    other = two.b.add_peer(two.a.address)
    with pytest.raises(xfer.InvalidArgument, match="not a Peer of this engine"):
        a.write_imm(other, 1)  # a Peer, of the other engine
    two.b.group([other]).close()


@pytest.mark.parametrize("name,value,span", [
    ("msg_max", 2**40, r"0 \.\. 2\*\*32-1"),
    ("timeout_ms", 2**64 + 5, r"0 \.\. 2\*\*64-1"),
    ("submit_depth", -1, r"0 \.\. 2\*\*32-1"),
    ("heartbeat_ms", 2**32, r"0 \.\. 2\*\*32-1"),
    ("worker_cpu", -3, r"-2 \.\. 2\*\*31-1"),
    ("log_level", 2**31, r"-2\*\*31 \.\. 2\*\*31-1"),
])
def test_engine_attributes_out_of_range(name: str, value: int, span: str) -> None:
    with pytest.raises(ValueError, match=f"{name} must be in {span}, not {value}") as ei:
        xfer.Engine(provider="tcp", nics="lo", **{name: value})
    assert isinstance(ei.value, xfer.InvalidArgument) and not isinstance(ei.value, TypeError)


@pytest.mark.parametrize("name,value", [("msg_max", "8192"), ("timeout_ms", 1.5), ("max_ops", True),
                                        ("provider", 3), ("nics", ["lo", 3]), ("on_peer_down", 1)])
def test_engine_attributes_of_the_wrong_type(name: str, value: Any) -> None:
    with pytest.raises(TypeError, match=name):
        xfer.Engine(**{"provider": "tcp", "nics": "lo", name: value})


def test_every_packed_integer_is_range_checked(two: Pair) -> None:
    a, src, dst = two.a, two.src, two.dst
    idx = np.arange(2, dtype=np.uint32)
    cases = [
        (lambda: a.write(src, dst, 2**64), "nbytes must be in 0 .. 2\\*\\*64-1"),
        (lambda: a.write(src, dst, 4, src_offset=-1), "src_offset must be in"),
        (lambda: a.write(src, dst, 4, dst_offset=2**64), "dst_offset must be in"),
        (lambda: a.write(src, dst, 4, flags=2**32), "flags must be in 0 .. 2\\*\\*32-1"),
        (lambda: a.write(src, dst, 4, timeout_ms=2**64 + 5), "timeout_ms must be in 0 .. 2\\*\\*64-1"),
        (lambda: a.write(src, dst, 4, tag=-1), "tag must be in"),
        (lambda: a.write(src, dst, 4, imm=2**32), "imm must be in 0 .. 2\\*\\*32-1"),
        (lambda: a.write_paged(src, dst, idx, idx, 2**64), "page_len must be in"),
        (lambda: a.write_paged(src, dst, idx, idx, 64, src_stride=-1), "src_stride must be in"),
        (lambda: a.write_paged(src, dst, idx, idx, 64, dst_base=2**64), "dst_base must be in"),
        (lambda: a.write_paged(src, dst, idx, idx, 64, timeout_ms=-5), "timeout_ms must be in"),
        (lambda: a.write_imm(two.peer, 1, tag=2**64), "tag must be in"),
        (lambda: a.send(two.peer, b"x", timeout_ms=-1), "timeout_ms must be in"),
        (lambda: a.expect_imm(1, 2**32), "count must be in 1 .. 2\\*\\*32-1"),
        (lambda: a.cancel(2**64), "tag must be in 1 .. 2\\*\\*64-1"),
        (lambda: a.barrier(two.group, -1), "imm must be in"),
        (lambda: a.scatter(two.group, src, [(0, dst, 2**64)]), "entry 0: nbytes must be in"),
        (lambda: a.scatter(two.group, src, [(2**32, dst, 4)]), "entry 0: member must be in"),
        (lambda: a.scatter(two.group, src, [(0, dst, 4)], flags=-1), "flags must be in"),
    ]
    for call, match in cases:
        with pytest.raises(ValueError, match=match):
            call()
    with pytest.raises(TypeError, match="nbytes must be an int, not str"):
        a.write(src, dst, "4")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="tag must be an int, not float"):
        a.write(src, dst, 4, tag=1.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="page_len must be an int, not NoneType"):
        a.write_paged(src, dst, idx, idx, None)  # type: ignore[arg-type]
    assert a.pending_count == 0


def _kv_kw() -> dict:
    kw = engine_kwargs(LOCAL)
    return {"provider": kw["provider"], "nics": kw.get("nics")}


def _layout(**over: int) -> kv.Layout:
    f = dict(kind=kv.GQA, layers=2, pages=8, page_tokens=4, kv_heads=2, head_dim=8, dtype_bytes=2,
             fused=0, tp_size=1, tp_rank=0)
    f.update(over)
    return kv.Layout(**f)


def test_kv_integers_and_types_are_checked() -> None:
    with pytest.raises(ValueError, match="Layout.layers must be in 0 .. 2\\*\\*32-1, not 4294967296"):
        _layout(layers=2**32)
    lay = _layout()
    with pytest.raises(ValueError, match="Layout.tp_rank must be in"):
        lay.tp_rank = -1
    with pytest.raises(ValueError, match="Layout.tp_rank"):
        lay.with_rank(2**32)
    with pytest.raises(AttributeError, match="no field"):
        lay.layer = 3  # type: ignore[attr-defined]
    pool = np.zeros(lay.nbytes, np.uint8)
    with pytest.raises(ValueError, match="max_requests must be in"):
        kv.Decoder(lay, pool, max_requests=2**32, **_kv_kw())
    with pytest.raises(ValueError, match="ctx_bytes must be in"):
        kv.Prefiller(lay, pool, ctx_bytes=-1, **_kv_kw())
    with pytest.raises(ValueError, match="heartbeat_ms must be in"):
        kv.Decoder(lay, pool, heartbeat_ms=2**32, **_kv_kw())
    with pytest.raises(TypeError, match="layout must be a kv.Layout, not dict"):
        kv.Decoder({"layers": 2}, pool, **_kv_kw())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="dst must be a kv.Layout"):
        kv.plan(lay, None)  # type: ignore[arg-type]
    with kv.Decoder(lay, pool, ctx_bytes=64, **_kv_kw()) as dec, \
            kv.Prefiller(lay, np.zeros(lay.nbytes, np.uint8), ctx_bytes=64, **_kv_kw()) as pf:
        g = dec.join([(pf.address, lay)])
        for call, match in [
            (lambda: dec.admit(2**64, g, 4), "request_id must be in"),
            (lambda: dec.admit(1, g, 2**32), "tokens must be in"),
            (lambda: dec.admit(1, 2**32, 4), "group must be in"),
            (lambda: dec.admit(1, g, 4, timeout_ms=-1), "timeout_ms must be in"),
            (lambda: dec.poll(0), "max_events must be in 1 .. 2\\*\\*31-1"),
            (lambda: dec.cancel(-1), "request_id must be in"),
            (lambda: pf.bind(1, [0, 2**32]), "pages\\[1\\] must be in"),
            (lambda: pf.layers_done(1, -1), "layers must be in"),
            (lambda: pf.poll(2, timeout_ms=2**64), "timeout_ms must be in"),
        ]:
            with pytest.raises(ValueError, match=match):
                call()
        with pytest.raises(TypeError, match="ranks\\[0\\] layout must be a kv.Layout, not int"):
            dec.join([(pf.address, 3)])  # type: ignore[list-item]
        with pytest.raises(TypeError, match="app must be bytes, not str"):
            dec.admit(1, g, 4, app="x")  # type: ignore[arg-type]
        assert dec.stats().admitted == 0 and pf.stats().jobs == 0
