"""Model shapes and the two layouts the demo and the simulator use.

Shapes come from the models' published ``config.json`` (sources in
docs/rl.md). Parameters are named ``layers.{l}.{part}`` and kept in the
orientation of ``nn.Linear`` (out_features x in_features).

Trainer layout (:func:`trainer_shards`), FSDP2/HSDP style:

* group 0, non-expert parameters: Shard(0) over the ``node`` GPUs of a node,
  one replica per node;
* group 1, routed experts (one parameter per expert and projection, as in
  Hugging Face checkpoints): Shard(0) across nodes, over the ranks with the
  same local index (``[i, i + node, i + 2 node, ...]``), expert e of layer l
  on local index ``(e + l) % node``.

Inference layout (:func:`inference_targets`): ``instances`` data-parallel
copies of one model, each on ``tp`` ranks: with ``attention="tp"`` (default)
attention and dense MLPs tensor-parallel (heads and intermediate columns split; q/k/v and gate/up
fused into one tensor; KV heads replicated when fewer than ``tp``), routed
experts expert-parallel (gate/up fused per expert), embeddings and lm_head
split by vocabulary, norms and router replicated; with ``attention="dp"``
everything but the routed experts whole on every rank. Matrices are FP8 with
128 x 128 block scales (``fp8=True``), embeddings, lm_head, router and norms
stay BF16, as in the DeepSeek-V3 FP8 checkpoint.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

from .layout import BLOCK, FP8, Piece, Placer, Sharded, Target, chunks, view2d

BF16 = "bfloat16"


@dataclass(frozen=True)
class ModelSpec:
    name: str
    vocab: int
    hidden: int
    layers: int
    dense_layers: int  # the first k layers have a dense MLP instead of experts
    dense_inter: int
    moe_inter: int
    experts: int
    shared_experts: int
    attn: str  # "mla" or "gqa"
    heads: int
    kv_heads: int = 0
    head_dim: int = 0
    qk_norm: bool = False
    q_lora: int = 0
    kv_lora: int = 0
    qk_nope: int = 0
    qk_rope: int = 0
    v_head: int = 0
    source: str = ""

    # ------------------------------------------------------------ parameters
    def attention(self, l: int) -> List[Tuple[str, Tuple[int, ...]]]:
        H, p = self.hidden, f"layers.{l}."
        if self.attn == "gqa":
            hd = self.head_dim
            out = [(p + "q", (self.heads * hd, H)), (p + "k", (self.kv_heads * hd, H)),
                   (p + "v", (self.kv_heads * hd, H)), (p + "o", (H, self.heads * hd))]
            if self.qk_norm:
                out += [(p + "q_norm", (hd,)), (p + "k_norm", (hd,))]
            return out
        nh = self.heads
        return [(p + "q_a", (self.q_lora, H)), (p + "q_a_norm", (self.q_lora,)),
                (p + "q_b", (nh * (self.qk_nope + self.qk_rope), self.q_lora)),
                (p + "kv_a", (self.kv_lora + self.qk_rope, H)), (p + "kv_a_norm", (self.kv_lora,)),
                (p + "kv_b", (nh * (self.qk_nope + self.v_head), self.kv_lora)), (p + "o", (H, nh * self.v_head))]

    def is_moe(self, l: int) -> bool:
        return l >= self.dense_layers and self.experts > 0

    def params(self) -> List[Tuple[str, Tuple[int, ...], bool]]:
        """(name, shape, is_routed_expert) of every parameter, in model order."""
        H = self.hidden
        out: List[Tuple[str, Tuple[int, ...], bool]] = [("embed", (self.vocab, H), False)]
        for l in range(self.layers):
            p = f"layers.{l}."
            out.append((p + "attn_norm", (H,), False))
            out += [(n, s, False) for n, s in self.attention(l)]
            out.append((p + "ffn_norm", (H,), False))
            if not self.is_moe(l):
                I = self.dense_inter
                out += [(p + "gate", (I, H), False), (p + "up", (I, H), False), (p + "down", (H, I), False)]
                continue
            out.append((p + "router", (self.experts, H), False))
            if self.shared_experts:
                S = self.shared_experts * self.moe_inter
                out += [(p + "shared.gate", (S, H), False), (p + "shared.up", (S, H), False),
                        (p + "shared.down", (H, S), False)]
            mi = self.moe_inter
            for e in range(self.experts):
                q = f"{p}experts.{e}."
                out += [(q + "gate", (mi, H), True), (q + "up", (mi, H), True), (q + "down", (H, mi), True)]
        out += [("norm", (H,), False), ("lm_head", (self.vocab, H), False)]
        return out

    def count(self) -> Tuple[int, int]:
        """(all parameters, routed-expert parameters)."""
        total = expert = 0
        for _, shape, ex in self.params():
            r, c = view2d(shape)
            total += r * c
            expert += r * c if ex else 0
        return total, expert


KIMI_K2 = ModelSpec(
    "Kimi-K2", vocab=163840, hidden=7168, layers=61, dense_layers=1, dense_inter=18432, moe_inter=2048,
    experts=384, shared_experts=1, attn="mla", heads=64, q_lora=1536, kv_lora=512, qk_nope=128, qk_rope=64,
    v_head=128, source="https://huggingface.co/moonshotai/Kimi-K2-Instruct/blob/main/config.json")
DEEPSEEK_V3 = ModelSpec(
    "DeepSeek-V3", vocab=129280, hidden=7168, layers=61, dense_layers=3, dense_inter=18432, moe_inter=2048,
    experts=256, shared_experts=1, attn="mla", heads=128, q_lora=1536, kv_lora=512, qk_nope=128, qk_rope=64,
    v_head=128, source="https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json")
QWEN3_235B = ModelSpec(
    "Qwen3-235B-A22B", vocab=151936, hidden=4096, layers=94, dense_layers=0, dense_inter=12288, moe_inter=1536,
    experts=128, shared_experts=0, attn="gqa", heads=64, kv_heads=4, head_dim=128, qk_norm=True,
    source="https://huggingface.co/Qwen/Qwen3-235B-A22B/blob/main/config.json")
#: The demo's model: real transformer structure (GQA with q/k norms, one
#: dense layer, MoE with a shared expert), dimensions that leave partial
#: 128 x 128 blocks and uneven FSDP shards.
SMALL = ModelSpec(
    "small-moe", vocab=1000, hidden=384, layers=2, dense_layers=1, dense_inter=640, moe_inter=192,
    experts=4, shared_experts=1, attn="gqa", heads=6, kv_heads=2, head_dim=64, qk_norm=True)

MODELS: Dict[str, ModelSpec] = {m.name: m for m in (KIMI_K2, DEEPSEEK_V3, QWEN3_235B, SMALL)}


# ---------------------------------------------------------------- trainer side
def trainer_meshes(trainers: int, node: int) -> Tuple[List[Tuple[int, ...]], List[Tuple[int, ...]]]:
    """(node meshes, cross-node expert meshes) of ``trainers`` ranks."""
    node = min(node, trainers)
    if trainers % node:
        raise ValueError(f"{trainers} trainers are not whole nodes of {node}")
    nodes = [tuple(range(n * node, (n + 1) * node)) for n in range(trainers // node)]
    across = [tuple(range(i, trainers, node)) for i in range(node)]
    return nodes, across


EXPERT_LAYOUTS = ("across", "node")


def trainer_shards(spec: ModelSpec, trainers: int, node: int = 8, dtype: str = BF16,
                   experts: str = "across") -> List[Sharded]:
    """Every parameter's FSDP placement. Non-expert parameters: Shard(0) over
    each node (one replica per node). Routed experts, by ``experts``:

    * ``"across"``: Shard(0) across nodes, over the ranks with one local
      index (expert e of layer l on local index ``(e + l) % node``);
    * ``"node"``: expert parallelism across nodes, whole experts per node
      (expert e of layer l on node ``(e + l) % nodes``), Shard(0) over that
      node's GPUs, so that reassembling one (``full_tensor()``) stays on NVLink.
    """
    if experts not in EXPERT_LAYOUTS:
        raise ValueError(f"experts must be one of {EXPERT_LAYOUTS}, not {experts!r}")
    nodes, across = trainer_meshes(trainers, node)
    out: List[Sharded] = []
    for name, shape, expert in spec.params():
        if expert:
            l, e = int(name.split(".")[1]), int(name.split(".")[3])
            meshes = across if experts == "across" else nodes
            out.append(Sharded(name, shape, dtype, meshes[(e + l) % len(meshes)], 1))
        else:
            out += [Sharded(name, shape, dtype, m, 0) for m in nodes]
    return out


# ---------------------------------------------------------------- inference side
def _rows(name: str, a: int, b: int, cols: int, at: int = 0) -> Piece:
    return Piece(name, (a, b), (0, cols), (at, 0))


def _stack(place: Placer, name: str, parts: Sequence[Tuple[str, int, int]], cols: int, dtype: str) -> Target:
    """Row ranges of several parameters stacked into one tensor (fusion)."""
    pieces, at = [], 0
    for src, a, b in parts:
        pieces.append(_rows(src, a, b, cols, at))
        at += b - a
    return place.add(name, (at, cols), dtype, pieces)


#: Inference layouts of everything but the routed experts (which are always
#: expert-parallel over the instance): ``"tp"`` tensor-parallel over the
#: instance; ``"dp"`` replicated on every rank of the instance (data-parallel
#: attention, as in DeepSeek-style wide-EP serving: each rank holds the whole
#: attention, dense MLPs, shared experts, embeddings and lm_head).
ATTENTION_LAYOUTS = ("tp", "dp")


def _rank_targets(spec: ModelSpec, rank: int, p: int, tp: int, fp8: bool, block: int,
                  attention: str = "tp") -> Placer:
    if attention not in ATTENTION_LAYOUTS:
        raise ValueError(f"attention must be one of {ATTENTION_LAYOUTS}, not {attention!r}")
    H = spec.hidden
    W = FP8 if fp8 else BF16
    place = Placer(rank)
    ep, etp = p, tp  # the experts' split: always over the instance
    if attention == "dp":
        p, tp = 0, 1  # everything else whole on this rank

    def full(name: str, shape) -> None:  # replicated, unchanged
        r, c = view2d(shape)
        place.add(name, (r, c), BF16, [Piece(name, (0, r), (0, c))])

    def split(n: int, what: str) -> Tuple[int, int]:
        if n % tp:
            raise ValueError(f"{spec.name}: {what} = {n} is not divisible by tp = {tp}")
        return n // tp * p, n // tp * (p + 1)

    va, vb = chunks(spec.vocab, tp)[p]
    place.add("embed", (vb - va, H), BF16, [_rows("embed", va, vb, H)])
    for l in range(spec.layers):
        q = f"layers.{l}."
        full(q + "attn_norm", (H,))
        if spec.attn == "gqa":
            hd = spec.head_dim
            h0, h1 = split(spec.heads, "heads")
            if spec.kv_heads >= tp:
                k0, k1 = split(spec.kv_heads, "kv_heads")
            else:
                k0 = p * spec.kv_heads // tp
                k1 = k0 + 1
            _stack(place, q + "qkv", [(q + "q", h0 * hd, h1 * hd), (q + "k", k0 * hd, k1 * hd),
                                      (q + "v", k0 * hd, k1 * hd)], H, W)
            place.add(q + "o", (H, (h1 - h0) * hd), W, [Piece(q + "o", (0, H), (h0 * hd, h1 * hd))])
            if spec.qk_norm:
                full(q + "q_norm", (hd,))
                full(q + "k_norm", (hd,))
        else:
            h0, h1 = split(spec.heads, "heads")
            qk, vh = spec.qk_nope + spec.qk_rope, spec.qk_nope + spec.v_head
            _stack(place, q + "qkv_a", [(q + "q_a", 0, spec.q_lora), (q + "kv_a", 0, spec.kv_lora + spec.qk_rope)], H, W)
            full(q + "q_a_norm", (spec.q_lora,))
            full(q + "kv_a_norm", (spec.kv_lora,))
            _stack(place, q + "q_b", [(q + "q_b", h0 * qk, h1 * qk)], spec.q_lora, W)
            _stack(place, q + "kv_b", [(q + "kv_b", h0 * vh, h1 * vh)], spec.kv_lora, W)
            place.add(q + "o", (H, (h1 - h0) * spec.v_head), W,
                      [Piece(q + "o", (0, H), (h0 * spec.v_head, h1 * spec.v_head))])
        full(q + "ffn_norm", (H,))
        if not spec.is_moe(l):
            a, b = split(spec.dense_inter, "dense_inter")
            _stack(place, q + "gate_up", [(q + "gate", a, b), (q + "up", a, b)], H, W)
            place.add(q + "down", (H, b - a), W, [Piece(q + "down", (0, H), (a, b))])
            continue
        full(q + "router", (spec.experts, H))
        if spec.shared_experts:
            a, b = split(spec.shared_experts * spec.moe_inter, "shared expert width")
            _stack(place, q + "shared.gate_up", [(q + "shared.gate", a, b), (q + "shared.up", a, b)], H, W)
            place.add(q + "shared.down", (H, b - a), W, [Piece(q + "shared.down", (0, H), (a, b))])
        if spec.experts % etp:
            raise ValueError(f"{spec.name}: experts = {spec.experts} is not divisible by {etp} ranks")
        e0, e1 = spec.experts // etp * ep, spec.experts // etp * (ep + 1)
        mi = spec.moe_inter
        for e in range(e0, e1):
            x = f"{q}experts.{e}."
            _stack(place, x + "gate_up", [(x + "gate", 0, mi), (x + "up", 0, mi)], H, W)
            place.add(x + "down", (H, mi), W, [Piece(x + "down", (0, H), (0, mi))])
    full("norm", (H,))
    va, vb = chunks(spec.vocab, tp)[p]
    place.add("lm_head", (vb - va, H), BF16, [_rows("lm_head", va, vb, H)])
    return place


def inference_targets(spec: ModelSpec, instances: int, tp: int, fp8: bool = True,
                      block: int = BLOCK, attention: str = "tp") -> Tuple[List[Target], List[int]]:
    """(targets of every inference rank, each rank's region size in bytes);
    rank = instance * tp + position; ``attention`` one of ATTENTION_LAYOUTS."""
    targets: List[Target] = []
    sizes: List[int] = []
    for i in range(instances):
        for p in range(tp):
            pl = _rank_targets(spec, i * tp + p, p, tp, fp8, block, attention)
            targets += pl.targets
            sizes.append(pl.nbytes)
    return targets, sizes


def rank_targets(spec: ModelSpec, rank: int, tp: int, fp8: bool = True,
                 attention: str = "tp") -> Tuple[List[Target], int]:
    """One inference rank's targets and region size (what it describes itself)."""
    pl = _rank_targets(spec, rank, rank % tp, tp, fp8, BLOCK, attention)
    return pl.targets, pl.nbytes
