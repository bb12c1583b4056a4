"""What each side holds: trainer shards and inference targets.

Every parameter is seen as a 2-D matrix, ``view2d(shape)``: the product of
the leading dimensions by the last one (a 1-D tensor of n elements is n x 1,
so that FSDP's Shard(0) is always a row range). A trainer rank holds a box of
that matrix (:class:`Shard`); an inference rank holds 2-D tensors at byte
offsets of the memory it registers (:class:`Target`), each assembled from
boxes of trainer parameters (:class:`Piece`): a tensor-parallel slice is one
piece, a fused projection (qkv, gate_up) several pieces stacked by rows.

These descriptions are what the controller collects; they are plain data,
turned into JSON-compatible lists by :func:`to_json` and back by the
``from_json`` constructors, which check types and ranges (the bytes come from
other processes).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, NamedTuple, Sequence, Tuple

#: Element sizes of the dtypes a description may name.
DTYPES: Dict[str, int] = {
    "bfloat16": 2,
    "float16": 2,
    "float32": 4,
    "float8_e4m3fn": 1,
}
FP8 = "float8_e4m3fn"
#: Block edge of FP8 per-block scales (DeepSeek-V3's weight_block_size).
BLOCK = 128
#: Byte alignment of every tensor an inference layout places (and of pool
#: allocations): a multiple of every element size and of a cache line.
ALIGN = 256

Box = Tuple[int, int]


class LayoutError(ValueError):
    """A description that cannot be satisfied: names what and why."""


def view2d(shape: Sequence[int]) -> Tuple[int, int]:
    """(rows, cols) of the 2-D view of a tensor of ``shape``."""
    shape = tuple(int(s) for s in shape)
    if not shape or any(s < 0 for s in shape):
        raise LayoutError(f"bad shape {shape}")
    if len(shape) == 1:
        return shape[0], 1
    rows = 1
    for s in shape[:-1]:
        rows *= s
    return rows, shape[-1]


def esize(dtype: str) -> int:
    try:
        return DTYPES[dtype]
    except KeyError:
        raise LayoutError(f"unknown dtype {dtype!r} (known: {', '.join(DTYPES)})") from None


def align(n: int, a: int = ALIGN) -> int:
    return (n + a - 1) // a * a


def _box(v: Any, what: str) -> Box:
    if not (isinstance(v, (list, tuple)) and len(v) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in v)):
        raise LayoutError(f"{what}: expected [start, stop], got {v!r}")
    a, b = int(v[0]), int(v[1])
    if not 0 <= a <= b:
        raise LayoutError(f"{what}: bad range [{a}, {b})")
    return a, b


def _int(v: Any, what: str, lo: int = 0) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or v < lo:
        raise LayoutError(f"{what}: expected an int >= {lo}, got {v!r}")
    return v


def _pair(v: Any, what: str) -> Tuple[int, int]:
    if not (isinstance(v, list) and len(v) == 2):
        raise LayoutError(f"{what}: expected [a, b], got {v!r}")
    return _int(v[0], what), _int(v[1], what)


def _str(v: Any, what: str) -> str:
    if not isinstance(v, str) or not v or len(v) > 512:
        raise LayoutError(f"{what}: expected a name, got {v!r}")
    return v


@dataclass(frozen=True)
class Shard:
    """One trainer rank's part of one parameter (a DTensor's local shard).

    ``mesh`` lists the ranks that together hold one full copy (a DeviceMesh
    row); several meshes may hold copies of the same parameter (HSDP
    replicas). ``rows``/``cols`` is this rank's box of the 2-D view.
    ``group`` is the mesh group: the meshes of one group are disjoint, and
    trainers pass a barrier between groups.
    """

    name: str
    shape: Tuple[int, ...]
    dtype: str
    rank: int
    mesh: Tuple[int, ...]
    rows: Box
    cols: Box
    group: int = 0

    @property
    def shape2d(self) -> Tuple[int, int]:
        return view2d(self.shape)

    @property
    def nbytes(self) -> int:
        return (self.rows[1] - self.rows[0]) * (self.cols[1] - self.cols[0]) * esize(self.dtype)

    def to_json(self) -> List[Any]:
        return [self.name, list(self.shape), self.dtype, self.rank, list(self.mesh), list(self.rows), list(self.cols), self.group]

    @classmethod
    def from_json(cls, v: Any) -> "Shard":
        if not isinstance(v, list) or len(v) != 8:
            raise LayoutError(f"shard: expected 8 fields, got {v!r:.200}")
        name = _str(v[0], "shard name")
        if not isinstance(v[1], list) or not v[1]:
            raise LayoutError(f"{name}: bad shape {v[1]!r}")
        shape = tuple(_int(s, f"{name} shape") for s in v[1])
        esize(v[2])
        if not isinstance(v[4], list) or not v[4]:
            raise LayoutError(f"{name}: bad mesh {v[4]!r}")
        s = cls(name, shape, v[2], _int(v[3], f"{name} rank"), tuple(_int(r, f"{name} mesh") for r in v[4]),
                _box(v[5], f"{name} rows"), _box(v[6], f"{name} cols"), _int(v[7], f"{name} group"))
        s.check()
        return s

    def check(self) -> None:
        r, c = self.shape2d
        if self.rows[1] > r or self.cols[1] > c:
            raise LayoutError(f"{self.name}: rank {self.rank}'s box {self.rows}x{self.cols} exceeds {r}x{c}")
        if self.rank not in self.mesh:
            raise LayoutError(f"{self.name}: rank {self.rank} is not in its mesh {self.mesh}")
        if len(set(self.mesh)) != len(self.mesh):
            raise LayoutError(f"{self.name}: mesh {self.mesh} repeats a rank")


def chunks(n: int, parts: int) -> List[Box]:
    """torch.chunk's split of n into ``parts`` ranges (ceil-sized, trailing ones
    possibly empty): FSDP2's Shard(0)."""
    size = -(-n // parts) if parts else 0
    return [(min(n, i * size), min(n, (i + 1) * size)) for i in range(parts)]


def fsdp_shards(name: str, shape: Sequence[int], dtype: str, mesh: Sequence[int], group: int = 0) -> List[Shard]:
    """The Shard(0) pieces of a parameter over ``mesh`` (one per rank, in mesh
    order; torch.chunk sizes, so the last ranks may hold less or nothing)."""
    shape = tuple(int(s) for s in shape)
    rows, cols = view2d(shape)
    inner = rows // shape[0] if len(shape) > 1 and shape[0] else 1
    out = []
    for rank, (a, b) in zip(mesh, chunks(shape[0], len(mesh))):
        out.append(Shard(name, shape, dtype, rank, tuple(mesh), (a * inner, b * inner), (0, cols), group))
    return out


@dataclass(frozen=True)
class Sharded:
    """A whole parameter split by FSDP's Shard(0) (torch.chunk sizes) over
    ``mesh``: the compact form of its per-rank :class:`Shard` list, for the
    controller (one entry per parameter and mesh instead of one per rank)."""

    name: str
    shape: Tuple[int, ...]
    dtype: str
    mesh: Tuple[int, ...]
    group: int = 0

    @property
    def shape2d(self) -> Tuple[int, int]:
        return view2d(self.shape)

    @property
    def chunk_rows(self) -> int:
        """Rows of the 2-D view per rank (the last ranks may hold fewer)."""
        return self.chunk_rows_of(self.shape2d)

    def chunk_rows_of(self, view: Tuple[int, int]) -> int:
        """:attr:`chunk_rows` given :attr:`shape2d` (``view``) already computed."""
        inner = view[0] // self.shape[0] if len(self.shape) > 1 and self.shape[0] else 1
        return -(-self.shape[0] // len(self.mesh)) * inner

    def shards(self) -> List[Shard]:
        return fsdp_shards(self.name, self.shape, self.dtype, self.mesh, self.group)

    def to_json(self) -> List[Any]:
        return [self.name, list(self.shape), self.dtype, list(self.mesh), self.group]

    @classmethod
    def from_json(cls, v: Any) -> "Sharded":
        if not isinstance(v, list) or len(v) != 5:
            raise LayoutError(f"sharded: expected 5 fields, got {v!r:.200}")
        name = _str(v[0], "sharded name")
        if not isinstance(v[1], list) or not v[1] or not isinstance(v[3], list) or not v[3]:
            raise LayoutError(f"{name}: bad shape or mesh")
        esize(v[2])
        mesh = tuple(_int(r, f"{name} mesh") for r in v[3])
        if len(set(mesh)) != len(mesh):
            raise LayoutError(f"{name}: mesh {mesh} repeats a rank")
        return cls(name, tuple(_int(x, f"{name} shape") for x in v[1]), v[2], mesh, _int(v[4], f"{name} group"))


class Piece(NamedTuple):
    """Rows x cols of parameter ``source``'s 2-D view, placed at ``at``
    (row, col) of the target."""

    source: str
    rows: Box
    cols: Box
    at: Tuple[int, int] = (0, 0)

    @property
    def height(self) -> int:
        return self.rows[1] - self.rows[0]

    @property
    def width(self) -> int:
        return self.cols[1] - self.cols[0]

    def to_json(self) -> List[Any]:
        return [self.source, list(self.rows), list(self.cols), list(self.at)]

    @classmethod
    def from_json(cls, v: Any) -> "Piece":
        if not isinstance(v, list) or len(v) != 4:
            raise LayoutError(f"piece: expected 4 fields, got {v!r:.200}")
        return cls(_str(v[0], "piece source"), _box(v[1], "piece rows"), _box(v[2], "piece cols"), _pair(v[3], "piece at"))


@dataclass(frozen=True)
class Target:
    """One tensor of an inference rank: ``shape`` (2-D) of ``dtype`` at byte
    ``offset`` of the rank's registered memory, assembled from ``pieces``.

    An FP8 target (``float8_e4m3fn``) also has float32 per-block scales at
    ``scale_offset``: a ``ceil(rows/block) x ceil(cols/block)`` row-major
    matrix of dequantization multipliers (DeepSeek-V3's ``weight_scale_inv``).
    """

    name: str
    rank: int
    shape: Tuple[int, int]
    dtype: str
    offset: int
    pieces: Tuple[Piece, ...]
    scale_offset: int = -1
    block: int = BLOCK

    @property
    def nbytes(self) -> int:
        return self.shape[0] * self.shape[1] * esize(self.dtype)

    @property
    def fp8(self) -> bool:
        return self.dtype == FP8

    @property
    def scale_shape(self) -> Tuple[int, int]:
        b = self.block
        return -(-self.shape[0] // b), -(-self.shape[1] // b)

    @property
    def scale_nbytes(self) -> int:
        r, c = self.scale_shape
        return r * c * 4 if self.fp8 else 0

    def content(self) -> Tuple[Any, ...]:
        """What the bytes are, whatever rank holds them: equal contents are
        prepared once and written to every rank that holds them."""
        return (self.dtype, self.shape, self.block if self.fp8 else 0, self.pieces)

    def spans(self) -> List[Tuple[int, int]]:
        """The byte ranges this target occupies in its rank's memory."""
        out = [(self.offset, self.offset + self.nbytes)]
        if self.fp8:
            out.append((self.scale_offset, self.scale_offset + self.scale_nbytes))
        return out

    def to_json(self) -> List[Any]:
        return [self.name, self.rank, list(self.shape), self.dtype, self.offset,
                [p.to_json() for p in self.pieces], self.scale_offset, self.block]

    @classmethod
    def from_json(cls, v: Any) -> "Target":
        if not isinstance(v, list) or len(v) != 8:
            raise LayoutError(f"target: expected 8 fields, got {v!r:.200}")
        name = _str(v[0], "target name")
        shape = _pair(v[2], f"{name} shape")
        esize(v[3])
        if not isinstance(v[5], list) or not v[5] or len(v[5]) > 4096:
            raise LayoutError(f"{name}: needs 1..4096 pieces")
        t = cls(name, _int(v[1], f"{name} rank"), shape, v[3], _int(v[4], f"{name} offset"),
                tuple(Piece.from_json(p) for p in v[5]), _int(v[6], f"{name} scale_offset", -1),
                _int(v[7], f"{name} block", 1))
        t.check()
        return t

    def check(self) -> None:
        self.check_placement()
        self.check_pieces()

    def check_placement(self) -> None:
        """Shape, dtype and offsets are usable."""
        rows, cols = self.shape
        if rows <= 0 or cols <= 0:
            raise LayoutError(f"{self.name}: empty shape {self.shape}")
        if self.offset % esize(self.dtype):
            raise LayoutError(f"{self.name}: offset {self.offset} not aligned to its dtype")
        if self.fp8 and (self.scale_offset < 0 or self.scale_offset % 4):
            raise LayoutError(f"{self.name}: an FP8 target needs a 4-aligned scale_offset")
        if self.block <= 0:
            raise LayoutError(f"{self.name}: block must be positive")

    def check_pieces(self) -> None:
        """The pieces tile the target exactly (no gap, no overlap)."""
        rows, cols = self.shape
        area = 0
        rects = []
        for p in self.pieces:
            r0, c0 = p.at
            if r0 < 0 or c0 < 0 or r0 + p.height > rows or c0 + p.width > cols or p.height == 0 or p.width == 0:
                raise LayoutError(f"{self.name}: piece {p.source} {p.rows}x{p.cols} at {p.at} is empty or outside {self.shape}")
            area += p.height * p.width
            rects.append((r0, r0 + p.height, c0, c0 + p.width, p.source))
        if area != rows * cols:
            raise LayoutError(f"{self.name}: pieces cover {area} of {rows * cols} elements")
        rects.sort()
        for i, a in enumerate(rects):  # few pieces per target: pairwise is cheap
            for b in rects[i + 1:]:
                if b[0] >= a[1]:
                    break
                if b[2] < a[3] and a[2] < b[3]:
                    raise LayoutError(f"{self.name}: pieces {a[4]} and {b[4]} overlap")


def to_json(items: Iterable[Any]) -> List[Any]:
    return [x.to_json() for x in items]


def shards_from_json(v: Any) -> List[Any]:
    """Shard (8 fields) and Sharded (5 fields) entries."""
    if not isinstance(v, list):
        raise LayoutError("shards: expected a list")
    return [Sharded.from_json(x) if isinstance(x, list) and len(x) == 5 else Shard.from_json(x) for x in v]


def targets_from_json(v: Any) -> List[Target]:
    if not isinstance(v, list):
        raise LayoutError("targets: expected a list")
    return [Target.from_json(x) for x in v]


class Placer:
    """Lays out one inference rank's tensors one after another, aligned."""

    def __init__(self, rank: int, start: int = 0):
        self.rank = rank
        self.end = start
        self.targets: List[Target] = []

    def add(self, name: str, shape: Tuple[int, int], dtype: str, pieces: Sequence[Piece], block: int = BLOCK) -> Target:
        off = align(self.end)
        n = shape[0] * shape[1] * esize(dtype)
        so = -1
        self.end = off + n
        if dtype == FP8:
            so = align(self.end)
            self.end = so + (-(-shape[0] // block)) * (-(-shape[1] // block)) * 4
        t = Target(name, self.rank, (int(shape[0]), int(shape[1])), dtype, off, tuple(pieces), so, block)
        self.targets.append(t)
        return t

    @property
    def nbytes(self) -> int:
        return align(self.end)
