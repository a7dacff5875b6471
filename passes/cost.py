"""When a subgraph is worth an engine: a small cost model over the IR.

A fused node is not free: running one engine from MXNet costs a hop through
the custom-operator path and the backend's launch, about 40-60 us on a CPU
(``benchmarks/``: the fused-node section). Native operators are cheap to
dispatch: inside one executor MXNet runs consecutive operators in bulk, about
0.3 us each for tiny tensors and 3-6 us for a reshape (measured on the 2-core
development machine with a chain of 20 operators). So a subgraph pays for its
engine only through the work it does faster:

* a dispatch per operator that no longer runs natively (``op_us`` each);
* elementwise passes over memory: MXNet takes 450-800 us per million elements
  for an elementwise operator on this CPU, and an engine fuses or
  parallelises them; every operator after the first saves
  ``fuse_us_per_melem`` per million output elements;
* faster kernels for the heavy operators: MXNet runs ResNet-50 at about 26 us
  per million multiply-adds, ONNX Runtime about 30% faster (``mac_us_per_mmac``).

Counting operators gets both ends wrong: six operators of shape arithmetic on a
few integers make an engine that costs more than it saves, while one large
``Convolution`` between two native operators is well worth one.

Everything here is pure: the estimates read the IR's shapes and attributes.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from .ir import Entry, Graph
from .partition import PartitionResult, Subgraph

__all__ = ["CostModel", "Timed", "choose_measured", "estimate_macs", "graph_macs", "keep_worthwhile",
           "subgraph_saving_us", "worth_an_engine"]

Shape = Tuple[int, ...]


@dataclass(frozen=True)
class CostModel:
    """Constants of the rule, in microseconds (measured on a 2-core x86 CPU; see the module docstring).

    Attributes:
        hop_us: Cost of running one engine from MXNet (custom-op hop plus launch).
        op_us: MXNet's dispatch cost per native operator.
        fuse_us_per_melem: Saved per million output elements of each operator after the first.
        mac_us_per_mmac: Saved per million multiply-adds by an engine's kernels.
    """

    hop_us: float = 50.0
    op_us: float = 1.0
    fuse_us_per_melem: float = 200.0
    mac_us_per_mmac: float = 8.0


def _prod(dims: Sequence[int]) -> int:
    p = 1
    for d in dims:
        p *= int(d)
    return p


def _ints(raw: Optional[str]) -> Tuple[int, ...]:
    """``"(3, 3)"`` / ``"[3,3]"`` / ``"3"`` -> ``(3, 3)`` / ``(3, 3)`` / ``(3,)``; empty for None."""
    if raw is None:
        return ()
    return tuple(int(x) for x in re.findall(r"-?\d+", str(raw)))


def _int(raw: Optional[str], default: int) -> int:
    vals = _ints(raw)
    return vals[0] if vals else default


def _bool(raw: Optional[str], default: bool) -> bool:
    if raw is None:
        return default
    return str(raw).strip().lower() in ("1", "true")


def _channel_axis(attrs: Mapping[str, str], rank: int) -> int:
    layout = attrs.get("layout")
    if layout and layout not in ("None", "") and layout.endswith("C"):
        return rank - 1
    return 1


def estimate_macs(op: str, attrs: Mapping[str, str], in_shapes: Sequence[Optional[Shape]],
                  out_shapes: Sequence[Optional[Shape]]) -> int:
    """Multiply-adds of one operator, estimated from its shapes.

    Only the operators whose cost dominates a network are counted; every other
    operator counts as 0.

    * ``Convolution``: output elements x (input channels / groups) x kernel volume.
    * ``Deconvolution``: input elements x (filters / groups) x kernel volume.
    * ``FullyConnected``: rows x input features x ``num_hidden`` (rows and
      features follow ``flatten``).
    * ``dot`` / ``batch_dot`` / ``linalg_gemm2``: output elements x the contracted dimension.
    * The interleaved attention matmuls: output elements x the head size.

    Returns:
        The estimate; 0 when a needed shape is unknown.
    """
    data = in_shapes[0] if in_shapes else None
    out = out_shapes[0] if out_shapes else None
    if op in ("Convolution", "_npx_convolution"):
        if data is None or out is None:
            return 0
        groups = max(1, _int(attrs.get("num_group"), 1))
        in_ch = data[_channel_axis(attrs, len(data))]
        return _prod(out) * (in_ch // groups) * _prod(_ints(attrs.get("kernel")))
    if op in ("Deconvolution", "_npx_deconvolution"):
        if data is None:
            return 0
        groups = max(1, _int(attrs.get("num_group"), 1))
        filters = _int(attrs.get("num_filter"), 0)
        if not filters and out is not None:
            filters = out[_channel_axis(attrs, len(out))]
        return _prod(data) * (filters // groups) * _prod(_ints(attrs.get("kernel")))
    if op in ("FullyConnected", "_npx_fully_connected"):
        if data is None or not data:
            return 0
        hidden = _int(attrs.get("num_hidden"), 0)
        if _bool(attrs.get("flatten"), True):
            rows, feats = data[0], _prod(data[1:])
        else:
            rows, feats = _prod(data[:-1]), data[-1]
        return rows * feats * hidden
    if op in ("dot", "batch_dot", "_np_dot", "linalg_gemm2", "_linalg_gemm2"):
        if data is None or out is None or not data:
            return 0
        if op == "batch_dot" or op.endswith("gemm2"):
            k = data[-2] if _bool(attrs.get("transpose_a"), False) else data[-1]
        else:
            k = data[0] if _bool(attrs.get("transpose_a"), False) else data[-1]
        return _prod(out) * k
    if op.startswith("_contrib_interleaved_matmul"):
        if data is None or out is None or len(data) < 3:
            return 0
        if op.endswith("_valatt"):  # out[s, b, :] sums over the attention's last axis
            att = in_shapes[1] if len(in_shapes) > 1 else None
            return _prod(out) * att[-1] if att else 0
        heads = max(1, _int(attrs.get("heads"), 1))
        width = data[-1] // (3 if "selfatt" in op else 1)  # q, k and v interleaved in one tensor
        return _prod(out) * max(1, width // heads)
    return 0


def graph_macs(graph: Graph) -> Dict[int, int]:
    """:func:`estimate_macs` of every operator node of ``graph``, by node id. O(V + E)."""
    out: Dict[int, int] = {}
    for n in graph.nodes:
        if n.is_variable:
            continue
        ins = [graph.shapes.get(e) for e in n.inputs]
        outs = [graph.shapes.get(Entry(n.id, k)) for k in range(n.num_outputs)]
        out[n.id] = estimate_macs(n.op, n.attrs, ins, outs)
    return out


def subgraph_saving_us(graph: Graph, nodes: Sequence[int], macs: Mapping[int, int],
                       model: CostModel = CostModel()) -> float:
    """Estimated microseconds an engine saves over running ``nodes`` natively, before its hop. O(len(nodes))."""
    elems = 0
    for i, v in enumerate(sorted(nodes)):
        if i == 0:
            continue
        shape = graph.shapes.get(Entry(v, 0))
        elems += _prod(shape) if shape else 0
    total_macs = sum(macs.get(v, 0) for v in nodes)
    return (len(nodes) * model.op_us + elems / 1e6 * model.fuse_us_per_melem
            + total_macs / 1e6 * model.mac_us_per_mmac)


def worth_an_engine(graph: Graph, nodes: Sequence[int], macs: Mapping[int, int],
                    model: CostModel = CostModel()) -> Optional[str]:
    """``None`` when an engine for ``nodes`` should pay for itself, else why not.

    Complexity: O(len(nodes)).
    """
    saving = subgraph_saving_us(graph, nodes, macs, model)
    if saving >= model.hop_us:
        return None
    total = sum(macs.get(v, 0) for v in nodes)
    return (f"in a subgraph of {len(nodes)} op{'s' if len(nodes) != 1 else ''} ({total:,} multiply-adds) that would "
            f"save about {saving:.0f} us, less than the {model.hop_us:.0f} us an engine costs to run")


def keep_worthwhile(graph: Graph, result: PartitionResult, model: CostModel = CostModel()) -> PartitionResult:
    """``result`` without the subgraphs :func:`worth_an_engine` rejects; their operators stay native.

    Dropping whole subgraphs keeps the others valid: contracting fewer node
    sets cannot create a cycle. The kept subgraphs are renumbered in order.

    Complexity: O(V + E).
    """
    macs = graph_macs(graph)
    kept: List[Subgraph] = []
    native = dict(result.native)
    for sg in result.subgraphs:
        why = worth_an_engine(graph, sg.nodes, macs, model)
        if why is None:
            kept.append(Subgraph(id=len(kept), name=f"trt_subgraph_{len(kept)}", nodes=sg.nodes))
        else:
            for v in sg.nodes:
                native[v] = why
    return PartitionResult(subgraphs=kept, native=native)


@dataclass(frozen=True)
class Timed:
    """One engine candidate of a subgraph, timed against MXNet running the same subgraph.

    Attributes:
        backend: The backend that built it.
        precision: ``fp32``, ``fp16``, ``bf16`` or ``int8``.
        ms: Median latency (ms) of a forward through the engine's fused node.
        ratio: Its time over MXNet's, the median over rounds that ran both side by
            side (what transient load disturbs least); ``None``: ``ms`` over MXNet's median.
    """

    backend: str
    precision: str
    ms: float
    ratio: Optional[float] = None

    def over(self, native_ms: float) -> float:
        """Its time relative to MXNet's (below 1: faster)."""
        if self.ratio is not None:
            return self.ratio
        return self.ms / native_ms if native_ms > 0 else float("inf")

    @property
    def label(self) -> str:
        return candidate_label((self.backend, self.precision))


def candidate_label(cand: Tuple[str, str]) -> str:
    """How decisions, log lines and the run-time check's sides name an engine candidate ``(backend, precision)``:
    ``"openvino fp32"``."""
    return f"{cand[0]} {cand[1]}"


#: An engine is kept only when it takes at most this share of MXNet's time. Timings at bind
#: are a few rounds on a machine that others may share: an engine within a few percent of
#: MXNet gains next to nothing and, with the next burst of load, may lose.
KEEP_BELOW = 0.95


#: A decision's text says which ratio decided when the median of the rounds' ratios and the ratio of the
#: medians differ by more than this factor (``engine 1.42x slower, measured 5.49 vs 5.64 ms`` under load
#: that came and went during the timing).
PAIRED_NOTE_ABOVE = 1.1


def choose_measured(native_ms: float, timed: Sequence[Timed],
                    keep_below: float = KEEP_BELOW) -> Tuple[Optional[Timed], str]:
    """The engine the measured rule keeps for a subgraph, or ``None`` for MXNet; and why, in words.

    A reduced-precision engine (fp16, bf16, int8) counts only when it is faster than
    the fastest fp32 engine; the fastest remaining engine is kept when its time
    over MXNet's (:meth:`Timed.over`) is below ``keep_below`` (:data:`KEEP_BELOW`:
    at least about 5% faster; above 1, an engine that slower is kept too). Ties and near-ties go to MXNet
    under the default margin. Pure; O(len(timed)).

    Example: ``choose_measured(3.2, [Timed("onnxruntime", "fp32", 4.1)])`` keeps
    MXNet: "kept native: engine 1.28x slower, measured 4.10 vs 3.20 ms".
    """
    fp32 = [t for t in timed if t.precision == "fp32"]
    best32 = min(fp32, key=lambda t: t.over(native_ms)) if fp32 else None
    notes: List[str] = []
    pool: List[Timed] = []
    for t in timed:
        if t.precision != "fp32" and best32 is not None and t.over(native_ms) >= best32.over(native_ms):
            notes.append(f"{t.label} {t.over(native_ms) / best32.over(native_ms):.2f}x slower than fp32 "
                         f"({t.ms:.2f} vs {best32.ms:.2f} ms)")
        else:
            pool.append(t)
    if not pool:
        return None, "kept native: no engine" + (f"; {'; '.join(notes)}" if notes else "")
    best = min(pool, key=lambda t: t.over(native_ms))
    rel = best.over(native_ms)
    plain = best.ms / native_ms if native_ms > 0 else float("inf")
    if best.ratio is not None and 0.0 < min(rel, plain) and max(rel, plain) < math.inf \
            and abs(math.log(rel / plain)) > math.log(PAIRED_NOTE_ABOVE):
        # Load that came and went during the timing moved the medians apart from the rounds' own ratios.
        notes.insert(0, f"{rel:.2f} is the median of the rounds' ratios, the medians' ratio {plain:.2f}")
    suffix = f"; {'; '.join(notes)}" if notes else ""
    if rel < keep_below:
        how = f"{1 / rel:.2f}x faster" if rel < 1.0 else f"{rel:.2f}x slower, within {keep_below:.2f}x"
        return best, (f"engine kept ({best.label}): {how}, measured {best.ms:.2f} vs {native_ms:.2f} ms" + suffix)
    if rel < 1.0:
        return None, (f"kept native: engine only {1 / rel:.2f}x faster (below {1 / keep_below:.2f}x), measured "
                      f"{best.ms:.2f} vs {native_ms:.2f} ms ({best.label})" + suffix)
    return None, (f"kept native: engine {rel:.2f}x slower, measured {best.ms:.2f} vs "
                  f"{native_ms:.2f} ms ({best.label})" + suffix)
