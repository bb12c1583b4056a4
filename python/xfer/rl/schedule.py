"""The static schedule: what every trainer rank does at every update, and
what every inference rank waits for. Computed once by the controller
(:func:`xfer.rl.plan.build`), checked, serialized and sent to every rank;
patched when an inference rank is replaced.

Tasks, per mesh group, each with an ``order`` (the position of its last
source parameter in the model) by which a rank executes them:

* ``["gather", order, param, mesh, root]``: the collective that reassembles
  ``param`` from its shards on mesh ``mesh`` (an index into ``meshes``), to
  rank ``root`` or to every member (``root == -1``, FSDP's ``full_tensor()``).
  Kept once per mesh (``gathers[group][mesh]``): every member runs them, in
  the same order, before its own tasks of the same ``order``. The meshes of
  one group are disjoint, so a rank takes part in one mesh's gathers per group
  and no two ranks can wait on each other's collectives in a different order.
* ``["copy", order, param, full, src_off, src_stride, rows, row_bytes, dests]``
  (in ``programs[trainer][group]``): ``rows`` rows of ``row_bytes`` bytes,
  ``src_stride`` apart, starting ``src_off`` bytes into this rank's shard of
  ``param`` (or into the gathered full tensor when ``full``), written
  unchanged to each destination ``[rank, dst_off, dst_stride]``. One WRITE
  when the rows are contiguous on both sides, else a paged WRITE of ``rows``
  pages.
* ``["prep", order, content, row0, row1, dests]``: rows ``[row0, row1)`` of
  content ``content`` (an entry of ``contents``: dtype, shape, block,
  pieces) assembled from its sources (fused), converted or quantized, and
  written to each destination ``[rank, data_off, scale_off]``: the values,
  then (FP8) the block scales of those rows.

Every WRITE carries an immediate (:mod:`xfer.rl.wire`) that names the step and
the trainer; ``expected[j][t]`` is how many trainer t delivers to inference
rank j per update (a paged WRITE delivers one per page).

Wire form (:meth:`Schedule.to_bytes`): ``b"XFRL"``, u16 format version, u32
CRC-32 of the payload, u64 payload length, then zlib-compressed JSON. It is
parsed as untrusted input: bounded, type-checked, and by default validated
(:meth:`Schedule.validate`) before use.
"""
from __future__ import annotations

import bisect
import contextlib
import gc
import json
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .layout import FP8, LayoutError, Piece, Target, esize

FORMAT_VERSION = 1
MAGIC = b"XFRL"
_HEAD = struct.Struct("<4sHIQ")
#: A schedule larger than this (compressed or not) is refused when parsed.
MAX_BYTES = 1 << 31


class ScheduleError(LayoutError):
    """A schedule that is malformed or does not cover the targets exactly once."""


@contextlib.contextmanager
def no_gc():
    """The cyclic collector off while millions of small lists are built: its
    full passes over them would cost more than the work itself (they are
    acyclic and freed by reference counting)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def copy_is_contiguous(rows: int, row_bytes: int, src_stride: int, dst_stride: int) -> bool:
    return rows == 1 or (src_stride == row_bytes and dst_stride == row_bytes)


@dataclass
class Content:
    """What the bytes of a prepared target are (shared by the ranks that hold it)."""

    name: str
    dtype: str
    shape: Tuple[int, int]
    block: int
    pieces: Tuple[Piece, ...]

    @property
    def fp8(self) -> bool:
        return self.dtype == FP8

    def to_json(self) -> List[Any]:
        return [self.name, self.dtype, list(self.shape), self.block, [p.to_json() for p in self.pieces]]

    @classmethod
    def from_json(cls, v: Any) -> "Content":
        if not isinstance(v, list) or len(v) != 5:
            raise ScheduleError("content: expected 5 fields")
        esize(v[1])
        return cls(str(v[0]), v[1], (int(v[2][0]), int(v[2][1])), int(v[3]), tuple(Piece.from_json(p) for p in v[4]))


@dataclass
class Schedule:
    trainers: int
    ranks: int  # inference ranks
    groups: List[int]
    params: Dict[str, Tuple[int, int, str]]  # name -> rows, cols, dtype
    meshes: List[Tuple[int, ...]]
    #: param -> mesh index -> how the members hold it: rows per rank (torch.chunk
    #: Shard(0), full width) or explicit boxes [rank, r0, r1, c0, c1]; for gathers
    boxes: Dict[str, Dict[int, Any]]
    contents: List[Content]
    programs: List[List[List[List[Any]]]]  # [trainer][group index] -> copy/prep tasks
    gathers: List[Dict[int, List[List[Any]]]]  # [group index][mesh] -> gather tasks
    expected: List[List[int]]  # [inference rank][trainer]
    region_bytes: List[int]
    targets: List[List[Target]]  # [inference rank]
    options: Dict[str, Any] = field(default_factory=dict)
    epoch: int = 0

    # ------------------------------------------------------------ execution order
    def mesh_of(self, rank: int, g: int) -> Optional[int]:
        """The mesh of group index ``g`` whose gathers trainer ``rank`` takes part in."""
        for m in self.gathers[g]:
            if rank in self.meshes[m]:
                return m
        return None

    def program(self, rank: int, g: int) -> List[List[Any]]:
        """Trainer ``rank``'s tasks of group index ``g`` in execution order: its
        mesh's gathers merged with its own tasks by ``order`` (gathers first)."""
        m = self.mesh_of(rank, g)
        gs = self.gathers[g].get(m, []) if m is not None else []
        own = self.programs[rank][g]
        out, i = [], 0
        for task in own:
            while i < len(gs) and gs[i][1] <= task[1]:
                out.append(gs[i])
                i += 1
            out.append(task)
        out.extend(gs[i:])
        return out

    def box(self, param: str, mesh: int, rank: int) -> Tuple[Tuple[int, int], Tuple[int, int]]:
        """Rank ``rank``'s box of ``param`` on mesh ``mesh`` (for a gather)."""
        lay = self.boxes[param][mesh]
        rows, cols = self.params[param][0], self.params[param][1]
        if isinstance(lay, int):
            i = self.meshes[mesh].index(rank)
            return (min(rows, i * lay), min(rows, (i + 1) * lay)), (0, cols)
        for r, r0, r1, c0, c1 in lay:
            if r == rank:
                return (r0, r1), (c0, c1)
        raise ScheduleError(f"{param}: rank {rank} has no box on mesh {mesh}")

    # ------------------------------------------------------------ wire form
    def to_json(self) -> Dict[str, Any]:
        return {
            "version": FORMAT_VERSION, "epoch": self.epoch, "trainers": self.trainers, "ranks": self.ranks,
            "groups": self.groups, "params": {k: list(v) for k, v in self.params.items()},
            "meshes": [list(m) for m in self.meshes],
            "boxes": {p: {str(m): b for m, b in d.items()} for p, d in self.boxes.items()},
            "contents": [c.to_json() for c in self.contents], "programs": self.programs,
            "gathers": [{str(m): ts for m, ts in g.items()} for g in self.gathers],
            "expected": self.expected, "region_bytes": self.region_bytes,
            "targets": [[t.to_json() for t in ts] for ts in self.targets], "options": self.options,
        }

    def to_bytes(self, level: int = 1) -> bytes:
        with no_gc():
            payload = zlib.compress(json.dumps(self.to_json(), separators=(",", ":")).encode(), level)
        return _HEAD.pack(MAGIC, FORMAT_VERSION, zlib.crc32(payload), len(payload)) + payload

    @classmethod
    def from_bytes(cls, data: bytes, validate: bool = True) -> "Schedule":
        data = bytes(data)
        if len(data) < _HEAD.size:
            raise ScheduleError("schedule: truncated header")
        magic, ver, crc, n = _HEAD.unpack_from(data)
        if magic != MAGIC:
            raise ScheduleError("schedule: bad magic")
        if ver != FORMAT_VERSION:
            raise ScheduleError(f"schedule: format version {ver}, this reader knows {FORMAT_VERSION}")
        if n != len(data) - _HEAD.size or n > MAX_BYTES:
            raise ScheduleError(f"schedule: payload length {n} does not match {len(data) - _HEAD.size}")
        payload = data[_HEAD.size:]
        if zlib.crc32(payload) != crc:
            raise ScheduleError("schedule: CRC mismatch")
        d = zlib.decompressobj()
        raw = d.decompress(payload, MAX_BYTES)
        if d.unconsumed_tail:
            raise ScheduleError("schedule: decompresses to more than the limit")
        with no_gc():
            try:
                s = cls._from_json(json.loads(raw))
            except ScheduleError:
                raise
            except (LayoutError, ValueError, TypeError, KeyError, IndexError, AttributeError) as ex:
                raise ScheduleError(f"schedule: malformed ({type(ex).__name__}: {ex})") from None
            if validate:
                s.validate()
        return s

    @classmethod
    def _from_json(cls, v: Dict[str, Any]) -> "Schedule":
        if v.get("version") != FORMAT_VERSION:
            raise ScheduleError(f"schedule: version {v.get('version')!r}")
        T, M = int(v["trainers"]), int(v["ranks"])
        if not (0 < T <= 1 << 16 and 0 < M <= 1 << 16):
            raise ScheduleError(f"schedule: {T} trainers, {M} inference ranks out of range")
        params = {str(k): (int(a[0]), int(a[1]), str(a[2])) for k, a in v["params"].items()}
        for _, (_, _, dt) in params.items():
            esize(dt)
        meshes = [tuple(int(r) for r in m) for m in v["meshes"]]
        boxes = {str(p): {int(m): (int(b) if isinstance(b, int) else [[int(x) for x in e] for e in b])
                          for m, b in d.items()} for p, d in v["boxes"].items()}
        targets = [[Target.from_json(t) for t in ts] for ts in v["targets"]]
        gathers = [{int(m): ts for m, ts in g.items()} for g in v["gathers"]]
        s = cls(T, M, [int(g) for g in v["groups"]], params, meshes, boxes,
                [Content.from_json(c) for c in v["contents"]], v["programs"], gathers,
                [[int(x) for x in row] for row in v["expected"]], [int(x) for x in v["region_bytes"]],
                targets, dict(v.get("options", {})), int(v.get("epoch", 0)))
        s._check_structure()
        return s

    def _check_structure(self) -> None:
        """Types and index ranges of every task, so that executing it can only
        touch what the schedule names."""
        T, M = self.trainers, self.ranks
        if (len(self.programs) != T or len(self.expected) != M or len(self.region_bytes) != M
                or len(self.targets) != M or len(self.gathers) != len(self.groups)):
            raise ScheduleError("schedule: table sizes do not match the rank and group counts")
        if any(len(row) != T for row in self.expected):
            raise ScheduleError("schedule: expected counts table is not ranks x trainers")
        for m in self.meshes:
            if not m or any(not 0 <= r < T for r in m):
                raise ScheduleError(f"schedule: mesh {m} names a trainer out of range")
        for g, gm in enumerate(self.gathers):
            seen = set()
            for m, tasks in gm.items():
                if not 0 <= m < len(self.meshes) or seen & set(self.meshes[m]):
                    raise ScheduleError(f"schedule: group {g} gathers on overlapping or unknown meshes")
                seen |= set(self.meshes[m])
                for task in tasks:
                    if (not isinstance(task, list) or len(task) != 5 or task[0] != "gather" or task[3] != m
                            or task[2] not in self.params or not isinstance(task[1], int)
                            or (task[4] != -1 and task[4] not in self.meshes[m])
                            or m not in self.boxes.get(task[2], {})):
                        raise ScheduleError(f"schedule: bad gather {task!r:.200}")
        sl = self.options.get("trainer")
        if sl is not None and (not isinstance(sl, int) or not 0 <= sl < T
                               or any(any(tasks) for t, prog in enumerate(self.programs) if t != sl for tasks in prog)):
            raise ScheduleError("schedule: a slice holds tasks of another trainer, or names no valid trainer")
        for t, prog in enumerate(self.programs):
            if len(prog) != len(self.groups):
                raise ScheduleError(f"schedule: trainer {t} has {len(prog)} groups, not {len(self.groups)}")
            for tasks in prog:
                for task in tasks:
                    self._check_task(t, task)

    def _check_task(self, t: int, task: Any) -> None:
        def dest_ok(d):
            return (isinstance(d, list) and len(d) == 3 and all(isinstance(x, int) for x in d)
                    and 0 <= d[0] < self.ranks and d[1] >= 0 and d[2] >= -1)

        if not isinstance(task, list) or len(task) < 2 or not isinstance(task[1], int):
            raise ScheduleError(f"trainer {t}: bad task {task!r:.100}")
        kind = task[0]
        if kind == "copy" and len(task) == 9:
            _, _, p, full, so, ss, rows, rb, dests = task
            if p not in self.params or not all(isinstance(x, int) and x >= 0 for x in (so, ss, rows, rb)):
                raise ScheduleError(f"trainer {t}: bad copy {task!r:.200}")
            if not isinstance(dests, list) or not all(dest_ok(d) for d in dests):
                raise ScheduleError(f"trainer {t}: bad copy destination {task!r:.200}")
        elif kind == "prep" and len(task) == 6:
            _, _, c, r0, r1, dests = task
            if not (isinstance(c, int) and 0 <= c < len(self.contents) and isinstance(r0, int)
                    and isinstance(r1, int) and 0 <= r0 < r1 <= self.contents[c].shape[0]):
                raise ScheduleError(f"trainer {t}: bad prep {task!r:.200}")
            if not isinstance(dests, list) or not all(dest_ok(d) for d in dests):
                raise ScheduleError(f"trainer {t}: bad prep destination {task!r:.200}")
        else:
            raise ScheduleError(f"trainer {t}: unknown or malformed task {task!r:.100}")

    # ------------------------------------------------------------ coverage
    def _spans(self, task: List[Any]):
        """(rank, start, length) of every byte range the task writes, pages one by one."""
        if task[0] == "copy":
            _, _, p, full, so, ss, rows, rb, dests = task
            for j, off, ds in dests:
                if copy_is_contiguous(rows, rb, ss, ds):
                    yield j, off, rows * rb
                else:
                    for i in range(rows):
                        yield j, off + i * ds, rb
        else:
            _, _, c, r0, r1, dests = task
            ct = self.contents[c]
            n = (r1 - r0) * ct.shape[1] * esize(ct.dtype)
            ns = 0
            if ct.fp8:
                b = ct.block
                ns = (-(-r1 // b) - r0 // b) * (-(-ct.shape[1] // b)) * 4
            for j, off, soff in dests:
                yield j, off, n
                if ns:
                    yield j, soff, ns

    @staticmethod
    def _imms(task: List[Any], contents: Sequence["Content"]):
        """(rank, immediates) per destination of a task."""
        if task[0] == "copy":
            _, _, p, full, so, ss, rows, rb, dests = task
            for d in dests:
                yield d[0], 1 if copy_is_contiguous(rows, rb, ss, d[2]) else rows
        else:
            k = 2 if contents[task[2]].fp8 else 1
            for d in task[5]:
                yield d[0], k

    def writes(self) -> List[List[Tuple[int, int, int]]]:
        """Per inference rank, (start, length, trainer) of every byte range
        written into it per update."""
        out: List[List[Tuple[int, int, int]]] = [[] for _ in range(self.ranks)]
        for t, prog in enumerate(self.programs):
            for tasks in prog:
                for task in tasks:
                    for j, s, n in self._spans(task):
                        out[j].append((s, n, t))
        return out

    def validate(self) -> None:
        """Every byte of every target of every inference rank is written exactly
        once per update, nothing else is, and ``expected`` matches the writes.
        A slice (:meth:`for_trainer`) has no targets: only its structure is
        checked (on parsing), the whole schedule was validated before."""
        if self.sliced_for is not None:
            return
        counts = [[0] * self.trainers for _ in range(self.ranks)]
        for t, prog in enumerate(self.programs):
            for tasks in prog:
                for task in tasks:
                    for j, k in self._imms(task, self.contents):
                        counts[j][t] += k
        if counts != self.expected:
            bad = [(j, t) for j in range(self.ranks) for t in range(self.trainers) if counts[j][t] != self.expected[j][t]]
            raise ScheduleError(f"schedule: expected immediate counts do not match the writes at (rank, trainer) {bad[:5]}")
        for j, w in enumerate(self.writes()):
            self._validate_rank(j, w)

    def _validate_rank(self, j: int, got: Optional[List[Tuple[int, int, int]]] = None) -> None:
        want = sorted(s for t in self.targets[j] for s in t.spans())
        for (a0, a1), (b0, b1) in zip(want, want[1:]):
            if b0 < a1:
                raise ScheduleError(f"inference rank {j}: targets overlap at byte {b0}")
        if want and want[-1][1] > self.region_bytes[j]:
            raise ScheduleError(f"inference rank {j}: targets end at {want[-1][1]}, past its {self.region_bytes[j]} bytes")
        if got is None:
            got = [(s, n, t) for t, prog in enumerate(self.programs) for tasks in prog for task in tasks
                   for jj, s, n in self._spans(task) if jj == j]
        got.sort()
        merged_got: List[Tuple[int, int]] = []
        end = -1
        for s, n, t in got:
            if n <= 0:
                raise ScheduleError(f"inference rank {j}: empty write from trainer {t} at {s}")
            if s < end:
                raise ScheduleError(f"inference rank {j}: byte {s} is written twice (trainer {t})")
            end = s + n
            if merged_got and s == merged_got[-1][1]:
                merged_got[-1] = (merged_got[-1][0], end)
            else:
                merged_got.append((s, end))
        merged_want = _merge(want)
        if merged_got != merged_want:
            raise ScheduleError(f"inference rank {j}: writes do not cover its targets exactly "
                                f"({_first_difference(merged_want, merged_got)})")

    # ------------------------------------------------------------ patching
    def retarget(self, rank: int, targets: Sequence[Target], region_bytes: Optional[int] = None) -> Tuple["Schedule", int]:
        """The schedule for a replacement of inference rank ``rank`` whose
        tensors (same names and contents) may sit at other offsets. Only the
        destinations on that rank change; which trainer prepares and sends
        what stays. Returns the new schedule (epoch + 1) and how many
        destination entries were rewritten."""
        if self.sliced_for is not None:
            raise ScheduleError("retarget: this is a trainer's slice; patch the whole schedule, then slice it again")
        old = sorted(self.targets[rank], key=lambda t: t.offset)
        new = {t.name: t for t in targets}
        if len(new) != len(targets) or set(new) != {t.name for t in old}:
            raise ScheduleError(f"inference rank {rank}: the replacement's tensors are not the same set")
        for t in old:
            n = new[t.name]
            n.check_placement()
            if n.content() != t.content():
                raise ScheduleError(f"inference rank {rank}: {t.name} changed content; recompute the schedule")
        data_starts = [t.offset for t in old]
        scaled = sorted((t for t in old if t.fp8), key=lambda t: t.scale_offset)
        scale_starts = [t.scale_offset for t in scaled]

        def moved(off: int) -> int:
            i = bisect.bisect_right(data_starts, off) - 1
            t = old[i] if i >= 0 else None
            if t is None or not t.offset <= off < t.offset + t.nbytes:
                raise ScheduleError(f"inference rank {rank}: destination {off} is in no target")
            return new[t.name].offset + off - t.offset

        def moved_scale(off: int) -> int:
            i = bisect.bisect_right(scale_starts, off) - 1
            t = scaled[i] if i >= 0 else None
            if t is None or not t.scale_offset <= off < t.scale_offset + t.scale_nbytes:
                raise ScheduleError(f"inference rank {rank}: scale destination {off} is in no target")
            return new[t.name].scale_offset + off - t.scale_offset

        changed = 0
        programs = []
        for prog in self.programs:
            gp = []
            for tasks in prog:
                nt = []
                for task in tasks:
                    dests = task[-1]
                    if any(d[0] == rank for d in dests):
                        nd = []
                        for d in dests:
                            if d[0] != rank:
                                nd.append(d)
                                continue
                            changed += 1
                            if task[0] == "copy":
                                nd.append([d[0], moved(d[1]), d[2]])
                            else:
                                nd.append([d[0], moved(d[1]), moved_scale(d[2]) if d[2] >= 0 else -1])
                        task = task[:-1] + [nd]
                    nt.append(task)
                gp.append(nt)
            programs.append(gp)
        targets_all = list(self.targets)
        targets_all[rank] = list(targets)
        rb = list(self.region_bytes)
        rb[rank] = region_bytes if region_bytes is not None else max((e for t in targets for _, e in t.spans()), default=0)
        s = Schedule(self.trainers, self.ranks, self.groups, self.params, self.meshes, self.boxes, self.contents,
                     programs, self.gathers, self.expected, rb, targets_all, dict(self.options), self.epoch + 1)
        s._validate_rank(rank)
        return s, changed

    # ------------------------------------------------------------ slicing
    @property
    def sliced_for(self) -> Optional[int]:
        """The trainer rank this schedule was cut for (:meth:`for_trainer`), or None."""
        v = self.options.get("trainer")
        return v if isinstance(v, int) else None

    def for_trainer(self, rank: int) -> "Schedule":
        """What trainer ``rank`` needs to run its updates, and nothing else:
        its own tasks, the gathers of its meshes, the contents and parameters
        they name (contents renumbered), every mesh (collectives are created
        in the same order everywhere), the region sizes and the immediate
        counts; no targets and no other rank's tasks. For Kimi-K2 at
        256 -> 128 that is a small fraction of the whole schedule, which every
        trainer would otherwise parse. Coverage is checked on the whole
        schedule by the controller (``validate``) before it is cut; a slice
        checks its structure only. Same epoch."""
        if not 0 <= rank < self.trainers:
            raise ValueError(f"for_trainer: no trainer {rank} (the schedule has {self.trainers})")
        if self.sliced_for is not None:
            raise ValueError(f"for_trainer: already a slice for trainer {self.sliced_for}")
        with no_gc():
            return self._slice(rank)

    def _slice(self, rank: int) -> "Schedule":
        remap: Dict[int, int] = {}
        names = set()
        programs: List[List[List[List[Any]]]] = [[[] for _ in self.groups] for _ in range(self.trainers)]
        for g, tasks in enumerate(self.programs[rank]):
            out = programs[rank][g]
            for task in tasks:
                if task[0] == "prep":
                    ci = remap.setdefault(task[2], len(remap))
                    names.update(p.source for p in self.contents[task[2]].pieces)
                    task = task[:2] + [ci] + task[3:]
                else:
                    names.add(task[2])
                out.append(task)
        gathers: List[Dict[int, List[List[Any]]]] = []
        for gm in self.gathers:
            mine = {m: ts for m, ts in gm.items() if rank in self.meshes[m]}
            for ts in mine.values():
                names.update(t[2] for t in ts)
            gathers.append(mine)
        contents = [None] * len(remap)
        for old, new in remap.items():
            contents[new] = self.contents[old]
        boxes = {p: {m: b for m, b in d.items() if rank in self.meshes[m]} for p, d in self.boxes.items() if p in names}
        return Schedule(self.trainers, self.ranks, self.groups, {p: v for p, v in self.params.items() if p in names},
                        self.meshes, {p: d for p, d in boxes.items() if d}, contents, programs, gathers, self.expected,
                        self.region_bytes, [[] for _ in range(self.ranks)], {**self.options, "trainer": rank}, self.epoch)

    # ------------------------------------------------------------ figures
    def summary(self) -> Dict[str, Any]:
        """Per-rank byte and operation counts (for logs, tests and the simulator)."""
        T, M = self.trainers, self.ranks
        egress, writes, imms, prep_out = [0] * T, [0] * T, [0] * T, [0] * T
        ingress = [0] * M
        for t, prog in enumerate(self.programs):
            for tasks in prog:
                for task in tasks:
                    for j, s, n in self._spans(task):
                        egress[t] += n
                        ingress[j] += n
                    for j, k in self._imms(task, self.contents):
                        writes[t] += 1
                        imms[t] += k
                    if task[0] == "prep":
                        ct = self.contents[task[2]]
                        prep_out[t] += (task[4] - task[3]) * ct.shape[1] * esize(ct.dtype)
        gathers = [0] * T
        for gm in self.gathers:
            for m, tasks in gm.items():
                for r in self.meshes[m]:
                    gathers[r] += len(tasks)
        return {"egress": egress, "ingress": ingress, "writes": writes, "imms": imms,
                "prep_out": prep_out, "gathers": gathers}


def _merge(spans: Sequence[Tuple[int, int]]) -> List[Tuple[int, int]]:
    out: List[Tuple[int, int]] = []
    for s, e in spans:
        if out and s == out[-1][1]:
            out[-1] = (out[-1][0], e)
        else:
            out.append((s, e))
    return out


def _first_difference(want: List[Tuple[int, int]], got: List[Tuple[int, int]]) -> str:
    for i, (w, g) in enumerate(zip(want, got)):
        if w != g:
            return f"expected bytes [{w[0]}, {w[1]}), written [{g[0]}, {g[1]})"
    if len(want) > len(got):
        return f"bytes [{want[len(got)][0]}, {want[len(got)][1]}) are not written"
    return f"bytes [{got[len(want)][0]}, {got[len(want)][1]}) are written outside every target"
