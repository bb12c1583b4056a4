"""The controller's planner: trainer shards + inference targets -> Schedule.

Two modes:

* ``"xfer"`` (default): data moves as little as possible. A target whose
  bytes are a plain copy of trainer data (same dtype) is written straight
  from the shards that hold it, each shard owner sending its own rows — no
  gather, no staging. A target that needs preparation (FP8 quantization,
  dtype conversion) is cut into row bands of whole quantization blocks; a
  band whose sources one rank holds entirely is prepared there from its
  shard; otherwise the band's sources are gathered to one rank of their mesh
  (a gather, not an all-gather) which prepares it. Fused projections cost
  nothing extra: their pieces land at their rows of the fused tensor.
* ``"published"``: the published design. Every parameter that a target uses
  is reassembled on one mesh of its replicas with ``full_tensor()`` (an
  all-gather, every member gets it), and any member of that mesh prepares
  and sends: each (parameter, inference rank) pair to the member that has
  sent the fewest bytes so far (a band with several destinations may be
  prepared by several members).

Either way the work is balanced greedily (largest first) on the bytes each
trainer NIC sends, over every replica mesh that holds the data, so that no
rank funnels; identical targets on several inference ranks (data-parallel
replicas, replicated norms) are prepared once and written to each.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .layout import DTYPES, FP8, LayoutError, Shard, Sharded, Target, align, esize
from .schedule import Content, Schedule, copy_is_contiguous, no_gc

MODES = ("xfer", "published")


class _Copy:
    """One full copy of a parameter on one mesh: which rank holds which box.
    Either torch.chunk rows (``chunk`` rows per rank, full width: the compact
    :class:`Sharded` form, answered by arithmetic) or explicit boxes."""

    __slots__ = ("mesh", "rows", "cols", "chunk", "explicit", "_index")

    def __init__(self, mesh: Tuple[int, ...], rows: int, cols: int, chunk: int = 0,
                 explicit: Optional[Dict[int, Shard]] = None):
        self.mesh, self.rows, self.cols, self.chunk, self.explicit = mesh, rows, cols, chunk, explicit
        self._index: Optional[Dict[int, int]] = None

    def box(self, r: int) -> Tuple[Tuple[int, int], Tuple[int, int]]:
        if self.explicit is not None:
            s = self.explicit[r]
            return s.rows, s.cols
        if self._index is None:
            self._index = {x: i for i, x in enumerate(self.mesh)}
        i, ch = self._index[r], self.chunk
        return (min(self.rows, i * ch), min(self.rows, (i + 1) * ch)), (0, self.cols)

    def items(self):
        for r in self.mesh:
            yield (r,) + self.box(r)

    def parts(self, rows: Tuple[int, int], cols: Tuple[int, int]):
        """(rank, rows, cols) of every non-empty intersection with rows x cols."""
        if self.explicit is None:
            ch = self.chunk
            for i in range(rows[0] // ch, (rows[1] - 1) // ch + 1):
                yield self.mesh[i], (max(rows[0], i * ch), min(rows[1], (i + 1) * ch)), cols
            return
        for r, s in self.explicit.items():
            a, b = max(rows[0], s.rows[0]), min(rows[1], s.rows[1])
            c, d = max(cols[0], s.cols[0]), min(cols[1], s.cols[1])
            if a < b and c < d:
                yield r, (a, b), (c, d)

    def owner(self, rows: Tuple[int, int], cols: Tuple[int, int]) -> Optional[int]:
        """The rank whose box holds all of rows x cols, if one does."""
        if self.explicit is None:
            i = rows[0] // self.chunk
            return self.mesh[i] if rows[1] <= (i + 1) * self.chunk else None
        for r, s in self.explicit.items():
            if s.rows[0] <= rows[0] and rows[1] <= s.rows[1] and s.cols[0] <= cols[0] and cols[1] <= s.cols[1]:
                return r
        return None


@dataclass
class _Param:
    name: str
    rows: int
    cols: int
    dtype: str
    group: int
    order: int
    meshes: Dict[Tuple[int, ...], _Copy] = field(default_factory=dict)
    uniform: int = -1  # the chunk of every copy when all are torch.chunk rows of one size, else 0; -1: not known yet

    def uniform_chunk(self) -> int:
        if self.uniform < 0:
            cps = list(self.meshes.values())
            ch = cps[0].chunk
            self.uniform = ch if all(cp.explicit is None and cp.chunk == ch for cp in cps) else 0
        return self.uniform


@dataclass
class _Content:
    index: int
    target: Target  # the first target with this content
    dests: List[Target]
    direct: bool
    sources: List[str]


def _check_tiling(p: _Param, mesh: Tuple[int, ...], shards: Dict[int, Shard]) -> None:
    if set(shards) != set(mesh):
        missing = sorted(set(mesh) - set(shards))
        raise LayoutError(f"{p.name}: mesh {mesh} lacks the shards of ranks {missing}")
    boxes = [(s.rows, s.cols, r) for r, s in shards.items() if s.nbytes]
    if all(c == (0, p.cols) for _, c, _ in boxes):
        at = 0
        for rows, _, r in sorted(boxes):
            if rows[0] != at:
                raise LayoutError(f"{p.name}: mesh {mesh} has a gap or overlap at row {at} (rank {r})")
            at = rows[1]
        if at != p.rows:
            raise LayoutError(f"{p.name}: mesh {mesh} covers rows [0, {at}) of {p.rows}")
        return
    area = sum((a[1] - a[0]) * (b[1] - b[0]) for a, b, _ in boxes)
    if area != p.rows * p.cols:
        raise LayoutError(f"{p.name}: mesh {mesh} shards cover {area} of {p.rows * p.cols} elements")
    for i, (ra, ca, x) in enumerate(boxes):
        for rb, cb, y in boxes[i + 1:]:
            if ra[0] < rb[1] and rb[0] < ra[1] and ca[0] < cb[1] and cb[0] < ca[1]:
                raise LayoutError(f"{p.name}: shards of ranks {x} and {y} overlap")


def _collect_params(shards: Sequence[Any]) -> Dict[str, _Param]:
    params: Dict[str, _Param] = {}
    explicit: Dict[Tuple[str, Tuple[int, ...]], Dict[int, Shard]] = {}

    def param(name, shape2d, dtype, group, who) -> _Param:
        p = params.get(name)
        if p is None:
            p = params[name] = _Param(name, shape2d[0], shape2d[1], dtype, group, len(params))
        elif (p.rows, p.cols, p.dtype, p.group) != (shape2d[0], shape2d[1], dtype, group):
            raise LayoutError(f"{name}: {who} describes it as {shape2d[0]}x{shape2d[1]} {dtype} group {group}, "
                              f"others as {p.rows}x{p.cols} {p.dtype} group {p.group}")
        return p

    # many entries share a shape and a mesh (every expert, every replica): their
    # 2-D views and the meshes' checks are computed once
    views: Dict[Tuple[int, ...], Tuple[int, int]] = {}
    good_meshes = set()
    for s in shards:
        if isinstance(s, Sharded):
            esize(s.dtype)
            v = views.get(s.shape)
            if v is None:
                v = views[s.shape] = s.shape2d
            p = param(s.name, v, s.dtype, s.group, f"mesh {s.mesh}")
            mesh = s.mesh
            if mesh in p.meshes or (explicit and (s.name, mesh) in explicit):
                raise LayoutError(f"{s.name}: mesh {mesh} is described twice")
            if mesh not in good_meshes:
                if len(set(mesh)) != len(mesh):
                    raise LayoutError(f"{s.name}: mesh {mesh} repeats a rank")
                good_meshes.add(mesh)
            p.meshes[mesh] = _Copy(mesh, p.rows, p.cols, chunk=max(1, s.chunk_rows_of(v)))
        elif isinstance(s, Shard):
            s.check()
            p = param(s.name, s.shape2d, s.dtype, s.group, f"rank {s.rank}")
            m = explicit.setdefault((s.name, s.mesh), {})
            if s.rank in m or s.mesh in p.meshes:
                raise LayoutError(f"{s.name}: rank {s.rank} is described twice on mesh {s.mesh}")
            m[s.rank] = s
        else:
            raise LayoutError(f"not a Shard or Sharded: {s!r:.100}")
    for (name, mesh), sh in explicit.items():
        p = params[name]
        _check_tiling(p, mesh, sh)
        p.meshes[mesh] = _Copy(mesh, p.rows, p.cols, explicit=sh)
    owner: Dict[Tuple[int, int], Tuple[int, ...]] = {}
    for g, mesh in {(p.group, m) for p in params.values() for m in p.meshes}:
        for r in mesh:
            if owner.setdefault((g, r), mesh) != mesh:
                raise LayoutError(f"mesh group {g}: rank {r} is in two meshes, {owner[(g, r)]} and {mesh} "
                                  "(the meshes of a group must be disjoint; put them in different groups)")
    return params


class _Planner:
    def __init__(self, shards: Sequence[Any], targets: Sequence[Target], mode: str, unit_bytes: int,
                 trainers: Optional[int], ranks: Optional[int], region_bytes: Optional[Sequence[int]]):
        if mode not in MODES:
            raise LayoutError(f"mode must be one of {MODES}, not {mode!r}")
        self.mode = mode
        self.unit_bytes = max(1, int(unit_bytes))
        self.params = _collect_params(shards)
        used = {r for m in {m for p in self.params.values() for m in p.meshes} for r in m}
        self.T = trainers if trainers is not None else 1 + max(used, default=-1)
        self.M = ranks if ranks is not None else 1 + max((t.rank for t in targets), default=-1)
        if any(r >= self.T for r in used):
            raise LayoutError(f"a shard names a trainer rank >= {self.T}")
        if any(t.rank >= self.M for t in targets):
            raise LayoutError(f"a target names an inference rank >= {self.M}")
        self.meshes: Dict[Tuple[int, ...], int] = {}
        for p in self.params.values():
            for m in p.meshes:
                self.meshes.setdefault(m, len(self.meshes))
        self.groups = sorted({p.group for p in self.params.values()})
        self.gi = {g: i for i, g in enumerate(self.groups)}
        self.targets: List[List[Target]] = [[] for _ in range(self.M)]
        for t in targets:
            self.targets[t.rank].append(t)
        self.region_bytes = list(region_bytes) if region_bytes is not None else [
            align(max((e for t in ts for _, e in t.spans()), default=0)) for ts in self.targets]
        self.egress = [0] * self.T
        self.tasks: List[List[List[Tuple[int, int, List[Any]]]]] = [[[] for _ in self.groups] for _ in range(self.T)]
        self.gather_tasks: List[Dict[int, List[Tuple[int, int, List[Any]]]]] = [{} for _ in self.groups]
        self.expected = [[0] * self.T for _ in range(self.M)]
        self.gathers: Dict[Tuple[str, Tuple[int, ...], int], None] = {}
        self.seq = 0
        self.contents = self._contents(targets)
        self.full_mesh: Dict[str, Tuple[int, ...]] = {}
        self._common: Dict[Tuple[Tuple[Tuple[int, ...], ...], ...], List[Tuple[int, ...]]] = {}

    # ------------------------------------------------------------ inputs
    def _contents(self, targets: Sequence[Target]) -> List[_Content]:
        by_key: Dict[Tuple[Any, ...], _Content] = {}
        sizes = DTYPES
        for t in targets:  # hundreds of thousands at full scale: Target.check_placement and content inlined
            dt, sh, blk = t.dtype, t.shape, t.block
            es = sizes.get(dt, 0)
            if not (es and sh[0] > 0 and sh[1] > 0 and blk > 0 and t.offset % es == 0
                    and (dt != FP8 or (t.scale_offset >= 0 and t.scale_offset % 4 == 0))):
                t.check_placement()  # raises, naming what is wrong
                esize(dt)
            key = (dt, sh, blk if dt == FP8 else 0, t.pieces)  # == t.content()
            c = by_key.get(key)
            if c is None:
                t.check_pieces()
                srcs = []
                for pc in t.pieces:
                    p = self.params.get(pc.source)
                    if p is None:
                        raise LayoutError(f"{t.name} (inference rank {t.rank}): no trainer holds {pc.source}")
                    if pc.rows[1] > p.rows or pc.cols[1] > p.cols:
                        raise LayoutError(f"{t.name}: piece {pc.rows}x{pc.cols} is outside {pc.source} ({p.rows}x{p.cols})")
                    if p.dtype == FP8:
                        raise LayoutError(f"{pc.source}: FP8 trainer parameters are not supported as sources")
                    if pc.source not in srcs:
                        srcs.append(pc.source)
                groups = {self.params[s].group for s in srcs}
                if len(groups) > 1:
                    raise LayoutError(f"{t.name}: its sources are in different mesh groups {sorted(groups)}")
                direct = all(self.params[s].dtype == t.dtype for s in srcs) and t.dtype != FP8
                c = by_key[key] = _Content(len(by_key), t, [], direct, srcs)
            c.dests.append(t)
        return list(by_key.values())

    # ------------------------------------------------------------ helpers
    def _add(self, rank: int, group: int, task: List[Any]) -> None:
        self.seq += 1
        self.tasks[rank][self.gi[group]].append((task[1], self.seq, task))

    def _gather(self, p: _Param, mesh: Tuple[int, ...], root: int) -> None:
        k = (p.name, mesh, root)
        if k in self.gathers:
            return
        self.gathers[k] = None
        self.seq += 1
        mi = self.meshes[mesh]
        self.gather_tasks[self.gi[p.group]].setdefault(mi, []).append(
            (p.order, self.seq, ["gather", p.order, p.name, mi, root]))

    def _mesh_choice(self, p: _Param) -> Tuple[int, ...]:
        """Published mode: the replica mesh that full_tensor()s p (fixed per param)."""
        m = self.full_mesh.get(p.name)
        if m is None:
            m = min(p.meshes, key=lambda mm: (sum(self.egress[r] for r in mm) / len(mm), self.meshes[mm]))
            self.full_mesh[p.name] = m
            self._gather(p, m, -1)
        return m

    # ------------------------------------------------------------ copies
    def _copy(self, c: _Content, pc_index: int) -> None:
        t = c.target
        pc = t.pieces[pc_index]
        p = self.params[pc.source]
        es = esize(p.dtype)
        nd = len(c.dests)
        if self.mode == "published":
            # every member holds the full tensor: each (parameter, inference rank)
            # pair goes to the member that has sent the fewest bytes so far
            mesh = self._mesh_choice(p)
            n = pc.height * pc.width * es
            for r, dests in self._split(mesh, c.dests, n):
                self._emit_copy(c, pc, p, r, pc.rows, pc.cols, None, dests)
            return
        best = None
        for mesh, cp in p.meshes.items():
            parts = [(r, rows, cols, (rows[1] - rows[0]) * (cols[1] - cols[0]) * es * nd)
                     for r, rows, cols in cp.parts(pc.rows, pc.cols)]
            cost = max(self.egress[r] + n for r, _, _, n in parts)
            if best is None or cost < best[0]:
                best = (cost, cp, parts)
        for r, rows, cols, _ in best[2]:
            self._emit_copy(c, pc, p, r, rows, cols, best[1])

    def _split(self, mesh: Tuple[int, ...], dests: List[Target], n: int) -> List[Tuple[int, List[Target]]]:
        """Published mode: each destination (``n`` bytes to it) to the member of
        ``mesh`` that has sent the fewest bytes so far; (rank, its destinations)
        in the order of first use."""
        by: Dict[int, List[Target]] = {}
        for d in dests:
            r = min(mesh, key=self.egress.__getitem__)
            self.egress[r] += n
            by.setdefault(r, []).append(d)
        return list(by.items())

    def _emit_copy(self, c: _Content, pc, p: _Param, r: int, rows, cols, cp: Optional[_Copy],
                   to: Optional[List[Target]] = None) -> None:
        """Rows x cols of p, from rank r's shard on copy ``cp`` (None: from the
        full tensor gathered there), to every destination of c (or those in ``to``)."""
        es = esize(p.dtype)
        full = cp is None
        if full:
            base_r, base_c, width = 0, 0, p.cols
        else:
            (br, _), (bc0, bc1) = cp.box(r)
            base_r, base_c, width = br, bc0, bc1 - bc0
        src_off = ((rows[0] - base_r) * width + (cols[0] - base_c)) * es
        src_stride = width * es
        n = rows[1] - rows[0]
        rb = (cols[1] - cols[0]) * es
        # equal contents: the same pieces at the same places, so the offset in
        # the target, the stride and the immediates per copy are the same for
        # every destination (hoisted: replicated tensors have up to M of them)
        W = c.target.shape[1]
        dr = pc.at[0] + rows[0] - pc.rows[0]
        dc = pc.at[1] + cols[0] - pc.cols[0]
        delta, stride = (dr * W + dc) * es, W * es
        inc = 1 if copy_is_contiguous(n, rb, src_stride, stride) else n
        exp = self.expected
        counted = to is not None  # published mode (``to``) has counted its bytes already
        to = c.dests if to is None else to
        dests = [[t.rank, t.offset + delta, stride] for t in to]
        for t in to:
            exp[t.rank][r] += inc
        if not counted:
            self.egress[r] += n * rb * len(dests)
        self._add(r, p.group, ["copy", p.order, p.name, full, src_off, src_stride, n, rb, dests])

    # ------------------------------------------------------------ preparation
    def _bands(self, c: _Content) -> List[Tuple[int, int]]:
        t = c.target
        rows, cols = t.shape
        blk = t.block if t.fp8 else 1
        per_row = cols * esize(t.dtype)
        band = max(blk, (self.unit_bytes // max(per_row, 1)) // blk * blk)
        return [(a, min(rows, a + band)) for a in range(0, rows, band)]

    def _needs(self, c: _Content, band: Tuple[int, int]) -> List[Tuple[str, Tuple[int, int], Tuple[int, int]]]:
        """The source boxes that rows ``band`` of the content are made of."""
        out = []
        for pc in c.target.pieces:
            a, b = max(band[0], pc.at[0]), min(band[1], pc.at[0] + pc.height)
            if a < b:
                r0 = pc.rows[0] + a - pc.at[0]
                out.append((pc.source, (r0, r0 + b - a), pc.cols))
        return out

    def _common_meshes(self, c: _Content, srcs: List[_Param]) -> List[Tuple[int, ...]]:
        """The meshes that hold every source of c, in mesh order (cached per
        set of meshes: fused sources and every layer share a few)."""
        key = tuple(tuple(p.meshes) for p in srcs)
        ms = self._common.get(key)
        if ms is None:
            common = set(key[0])
            for k in key[1:]:
                common &= set(k)
            ms = self._common[key] = sorted(common, key=self.meshes.__getitem__)
        if not ms:
            raise LayoutError(f"{c.target.name}: its sources {c.sources} have no mesh in common; a fused target needs "
                              "all its sources on one mesh")
        return ms

    def _prep(self, c: _Content) -> None:
        t = c.target
        srcs = [self.params[s] for s in c.sources]
        group = srcs[0].group
        order = max(p.order for p in srcs)
        band_bytes = lambda b: (b[1] - b[0]) * t.shape[1] * esize(t.dtype) * len(c.dests)  # noqa: E731
        bands = self._bands(c)
        if self.mode == "published":
            mesh = self._mesh_choice(srcs[0])
            for p in srcs[1:]:
                if self._mesh_choice(p) != mesh:  # a source full_tensor()ed elsewhere: once more here
                    self._gather(p, mesh, -1)
            assign = [self._split(mesh, c.dests, band_bytes(b) // len(c.dests)) for b in bands]
            self._emit_preps(c, bands, assign, group, order)
            return
        meshes = self._common_meshes(c, srcs)
        owners: List[int] = []
        root: Optional[Tuple[Tuple[int, ...], int]] = None
        params = self.params
        uniform = all(params[n].uniform_chunk() for n in c.sources)
        for b in bands:
            need = self._needs(c, b)
            local = []
            if uniform:  # every copy split alike: the owner's position in its mesh is the same on each
                pos = -1
                for name, rows, _ in need:
                    ch = params[name].uniform
                    i = rows[0] // ch
                    if rows[1] > (i + 1) * ch or (pos >= 0 and i != pos):
                        pos = -2  # spans two shards, or two needs on different positions: no local owner
                        break
                    pos = i
                if pos >= 0:
                    local = [m[pos] for m in meshes]
                meshes_to_scan = ()
            else:
                meshes_to_scan = meshes
            for m in meshes_to_scan:
                cand = None
                for name, rows, cols in need:
                    r = self.params[name].meshes[m].owner(rows, cols)
                    if r is None or (cand is not None and r != cand):
                        cand = None
                        break
                    cand = r
                if cand is not None:
                    local.append(cand)
            if local:
                r = min(local, key=self.egress.__getitem__)
            else:
                if root is None:
                    eg = self.egress
                    m = meshes[0] if len(meshes) == 1 else min(meshes, key=lambda mm: min(eg[x] for x in mm))
                    root = (m, min(m, key=eg.__getitem__))
                    for p in srcs:
                        self._gather(p, root[0], root[1])
                r = root[1]
            self.egress[r] += band_bytes(b)
            owners.append(r)
        self._emit_preps(c, bands, [[(r, c.dests)] for r in owners], group, order)

    def _emit_preps(self, c: _Content, bands, assign, group: int, order: int) -> None:
        """``assign[i]``: the (rank, destinations) that prepare and write band i."""
        t = c.target  # every destination has the same shape, dtype and block
        es, W, fp8 = esize(t.dtype), t.shape[1], t.fp8
        ncb = -(-W // t.block)
        k = 2 if fp8 else 1
        exp = self.expected
        i = 0
        while i < len(bands):  # merge consecutive bands prepared by the same ranks for the same destinations
            j = i
            while j + 1 < len(bands) and assign[j + 1] == assign[i]:
                j += 1
            r0, r1 = bands[i][0], bands[j][1]
            doff = r0 * W * es
            for r, to in assign[i]:
                if fp8:
                    soff = (r0 // t.block) * ncb * 4
                    dests = [[d.rank, d.offset + doff, d.scale_offset + soff] for d in to]
                else:
                    dests = [[d.rank, d.offset + doff, -1] for d in to]
                for d in to:
                    exp[d.rank][r] += k
                self._add(r, group, ["prep", order, c.index, r0, r1, dests])
            i = j + 1

    # ------------------------------------------------------------ driver
    def run(self) -> Schedule:
        items = []
        for c in self.contents:
            if c.direct:
                for i, pc in enumerate(c.target.pieces):
                    items.append((pc.height * pc.width * esize(c.target.dtype) * len(c.dests), c.index, i))
            else:
                items.append((c.target.nbytes * len(c.dests), c.index, -1))
        items.sort(key=lambda x: (-x[0], x[1], x[2]))
        for _, ci, pi in items:
            c = self.contents[ci]
            if pi >= 0:
                self._copy(c, pi)
            else:
                self._prep(c)
        programs = [[[task for _, _, task in sorted(g, key=lambda x: x[:2])] for g in prog] for prog in self.tasks]
        gathers = [{m: [task for _, _, task in sorted(ts, key=lambda x: x[:2])] for m, ts in sorted(gm.items())}
                   for gm in self.gather_tasks]
        mesh_list = sorted(self.meshes, key=lambda m: self.meshes[m])
        boxes: Dict[str, Dict[int, Any]] = {}
        for name, mesh, _ in self.gathers:
            cp = self.params[name].meshes[mesh]
            boxes.setdefault(name, {})[self.meshes[mesh]] = cp.chunk if cp.explicit is None else [
                [r, rows[0], rows[1], cols[0], cols[1]] for r, rows, cols in cp.items()]
        contents = [Content(c.target.name, c.target.dtype, c.target.shape, c.target.block if c.target.fp8 else 1,
                            c.target.pieces) for c in self.contents]
        params = {p.name: (p.rows, p.cols, p.dtype) for p in self.params.values()}
        return Schedule(self.T, self.M, self.groups, params, mesh_list, boxes, contents, programs, gathers, self.expected,
                        self.region_bytes, self.targets, {"mode": self.mode, "unit_bytes": self.unit_bytes})


def build(shards: Sequence[Any], targets: Sequence[Target], *, mode: str = "xfer", unit_bytes: int = 32 << 20,
          trainers: Optional[int] = None, ranks: Optional[int] = None,
          region_bytes: Optional[Sequence[int]] = None, validate: bool = True) -> Schedule:
    """The static schedule that moves ``shards`` (every trainer rank's, from
    :func:`xfer.rl.fsdp_shards` or DTensor placements) into ``targets``
    (every inference rank's layout). ``unit_bytes`` bounds one prepared band
    (the granularity of balancing and of staging memory). Raises
    :class:`LayoutError` naming what cannot be satisfied."""
    with no_gc():
        s = _Planner(shards, targets, mode, unit_bytes, trainers, ranks, region_bytes).run()
        if validate:
            s.validate()
    return s
