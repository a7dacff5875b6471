"""Comparing an accelerated model with native MXNet, engine by engine and output by output.

Two checks, both against MXNet's own values for the same graph and weights:

* :func:`check_engines`: every engine is fed the values native MXNet computes
  for its inputs and must produce native's values of its outputs. Upstream
  rounding cannot hide or excuse an error here, so this is the strict check of
  each converted subgraph (fp32: ``|got - ref| <= atol + rtol * max|ref|`` per tensor).
* :func:`compare_outputs`: the final outputs, with detection outputs (rows of
  ``[id, score, box...]`` padded with -1) compared as sets, since detections
  that tie in score may come out in another order.

Detectors' final detections are checked by :func:`detection_problems`: a valid
greedy suppression of native's candidates, not equal to native's, since the
suppression turns the rounding of tied scores into other kept boxes.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from mx_trt.builder.backends.base import Buffer
from mx_trt.passes.fuse import boundary
from mx_trt.passes.ir import Entry

#: fp32 tolerance for whole models, relative to each tensor's range.
RTOL, ATOL = 1e-3, 1e-4


def native_values(sym: Any, params: Mapping[str, Any], shapes: Mapping[str, Tuple[int, ...]],
                  inputs: Mapping[str, np.ndarray], graph: Any, entries: Sequence[Entry]) -> Dict[Entry, np.ndarray]:
    """MXNet's values of ``entries`` of ``graph`` (the pass's import of ``sym``), from one native forward."""
    import mxnet as mx

    from mx_trt.frontends import hook
    from mx_trt.graph.importer import _output_owners, _with_unique_names

    usym, _, _ = _with_unique_names(sym)
    internals = usym.get_internals()
    index: Dict[Tuple[str, int], int] = {}
    for i, nm in enumerate(_output_owners(internals)):
        k = sum(1 for key in index if key[0] == nm)
        index[(nm, k)] = i
    got: Dict[Entry, np.ndarray] = {}
    wanted: List[Entry] = []
    for e in dict.fromkeys(entries):
        node = graph.nodes[e.node]
        if node.is_variable and node.name in inputs:
            got[e] = np.asarray(inputs[node.name])
        elif node.is_variable and node.name in params:
            got[e] = params[node.name].asnumpy()
        else:
            wanted.append(e)
    group = mx.sym.Group([internals[index[(graph.nodes[e.node].name, e.index)]] for e in wanted])
    type_dict = {k: np.asarray(v).dtype.name for k, v in inputs.items()}
    with hook.disabled():
        exe = group.simple_bind(mx.cpu(), grad_req="null", type_dict=type_dict, **shapes)
    for k, v in exe.arg_dict.items():
        if k in inputs:
            v[:] = inputs[k]
        elif k in params:
            params[k].copyto(v)
    for k, v in exe.aux_dict.items():
        params[k].copyto(v)
    exe.forward(is_train=False)
    got.update({e: o.asnumpy() for e, o in zip(wanted, exe.outputs)})
    return got


def check_engines(model: Any, exe: Any, rtol: float = RTOL, atol: float = ATOL, as_sets: bool = False,
                  supp: Optional[Suppression] = None) -> List[str]:
    """Run every engine of ``exe`` on native MXNet's values of its inputs; return the mismatches.

    ``as_sets`` compares each float output as a set of rows (see :func:`_rows`): for
    engines that sort tied scores (MXNet's CPU sort is unstable, so any order of
    equal keys is as right as another).

    ``supp`` (a detector's, from :func:`native_suppression`): an engine that
    computes the model's detections (graph outputs 0-2, ids, scores and boxes
    after suppression) has them checked by :func:`detection_problems` against
    native's candidates of the final suppression; its other outputs are compared
    as usual. Suppression turns
    rounding differences of tied scores into other kept boxes, so elementwise
    equality is not the measure there.

    Returns:
        One line per output that differs from native beyond the tolerance (empty: all match).
    """
    import mx_trt

    info = mx_trt.bind_info(exe)
    assert info is not None, "the executor was bound natively"
    graph = info.plan.graph
    absorbed = info.plan.absorbed_ids()
    by_name = {sg.name: sg for sg in info.plan.partition.subgraphs}
    jobs = []
    entries: List[Entry] = []
    for fused in info.engines:
        ins, outs = boundary(graph, by_name[fused.name].nodes, absorbed)
        jobs.append((fused, ins, outs))
        entries += ins + outs
    ref = native_values(model.sym, model.params, model.shapes, model.inputs, graph, entries)
    bad: List[str] = []
    heads = list(graph.heads[:3])
    for fused, ins, outs in jobs:
        engine = fused.engine
        feeds = [np.ascontiguousarray(ref[e], dtype=t.dtype) for e, t in zip(ins, engine.inputs)]
        shapes = engine.output_shapes([f.shape for f in feeds])
        results = [np.empty(s, dtype=t.dtype) for s, t in zip(shapes, engine.outputs)]
        engine.run([Buffer(int(f.ctypes.data), f.shape, f.dtype.name) for f in feeds],
                   [Buffer(int(r.ctypes.data), r.shape, r.dtype.name) for r in results])
        got = dict(zip(outs, results))
        if supp is not None and all(h in got for h in heads):
            bad += [f"{fused.name}: {p}" for p in detection_problems([ref[h] for h in heads], [got[h] for h in heads], supp)]
            outs = [e for e in outs if e not in heads]
            results = [got[e] for e in outs]
        for e, r in zip(outs, results):
            want, where = ref[e], f"{fused.name} {graph.nodes[e.node].op} {graph.nodes[e.node].name}[{e.index}]"
            if r.shape != want.shape or r.dtype != want.dtype:
                bad.append(f"{where}: {r.shape} {r.dtype} against native {want.shape} {want.dtype}")
                continue
            if r.dtype.kind in "iub":
                if not np.array_equal(r, want):
                    bad.append(f"{where}: {int((r != want).sum())} integer elements differ")
                continue
            if as_sets:
                r, want = _rows(r), _rows(want)
            err = float(np.abs(r.astype(np.float64) - want).max()) if r.size else 0.0
            scale = float(np.abs(want).max()) if want.size else 0.0
            if not np.isfinite(scale) or err > atol + rtol * scale:
                bad.append(f"{where}: max abs error {err:.3g} on a range of {scale:.3g}")
    return bad


def _rows(a: np.ndarray) -> np.ndarray:
    """The rows of ``a`` along its first axis longer than 1, sorted, without rows of -1 (padding)."""
    lead = next((i for i, d in enumerate(a.shape) if d > 1), a.ndim - 1)
    rows = a.reshape(int(np.prod(a.shape[:lead + 1])), -1).astype(np.float64)
    rows = rows[~np.all(rows == -1, axis=-1)]
    order = np.lexsort(rows.T[::-1])
    return rows[order]


def compare_outputs(ref: Sequence[np.ndarray], got: Sequence[np.ndarray], as_sets: bool = False,
                    rtol: float = RTOL, atol: float = ATOL) -> List[str]:
    """Final outputs against native; ``as_sets`` compares each output's rows as a set."""
    bad: List[str] = []
    assert len(ref) == len(got)
    for k, (r, g) in enumerate(zip(ref, got)):
        if r.shape != g.shape or r.dtype != g.dtype:
            bad.append(f"output {k}: {g.shape} {g.dtype} against native {r.shape} {r.dtype}")
            continue
        if as_sets and r.ndim >= 2:
            r, g = _rows(r), _rows(g)
            if r.shape != g.shape:
                bad.append(f"output {k}: {len(g)} rows against native {len(r)}")
                continue
        err = float(np.abs(g.astype(np.float64) - r).max()) if r.size else 0.0
        scale = float(np.abs(r).max()) if r.size else 0.0
        if err > atol + rtol * scale:
            bad.append(f"output {k}: max abs error {err:.3g} on a range of {scale:.3g}")
    return bad


def op_counts(sym: Any) -> Dict[str, int]:
    counts: Dict[str, int] = {}
    for n in json.loads(sym.tojson())["nodes"]:
        if n["op"] != "null":
            counts[n["op"]] = counts.get(n["op"], 0) + 1
    return counts


#: MXNet's non-maximum suppression operators (GluonCV's detectors end with one).
NMS_OPS = ("_contrib_box_nms", "_contrib_box_non_maximum_suppression")


@dataclass(frozen=True)
class Suppression:
    """The last ``box_nms`` before a detector's outputs: its settings and native MXNet's candidates.

    ``rows`` is native's value of the operator's input, ``(batch, N, width)`` rows
    of ``[.., id, score, box ..]``. Detections are the candidates the greedy
    suppression kept, so an accelerated detection must be one of these rows, and
    no two detections it keeps may overlap more
    than ``overlap`` (see :func:`suppression_problems`).
    """

    rows: np.ndarray
    id_index: int
    score_index: int
    coord_start: int
    overlap: float
    valid_thresh: float
    background_id: int
    per_class: bool
    center_in: bool
    center_out: bool


def final_suppression(graph: Any) -> Any:
    """The ``box_nms`` node nearest upstream of ``graph``'s second head (the scores), or ``None``.

    Breadth-first over producers: O(nodes + edges).
    """
    seen = {graph.heads[1].node}
    frontier = [graph.heads[1].node]
    while frontier:
        nxt = []
        for v in frontier:
            node = graph.nodes[v]
            if node.op in NMS_OPS:
                return node
            for e in node.inputs:
                if e.node not in seen:
                    seen.add(e.node)
                    nxt.append(e.node)
        frontier = nxt
    return None


def native_suppression(model: Any, graph: Any) -> Suppression:
    """The final suppression of ``model`` (imported as ``graph``), with native MXNet's candidates (one forward)."""
    node = final_suppression(graph)
    assert node is not None, "no box_nms upstream of the detection outputs"
    rows = native_values(model.sym, model.params, model.shapes, model.inputs, graph, [node.inputs[0]])[node.inputs[0]]
    rows = np.asarray(rows, np.float64)
    a = node.attrs
    id_index = int(a.get("id_index", -1))
    return Suppression(rows=rows.reshape(rows.shape[0], -1, rows.shape[-1]), id_index=id_index,
                       score_index=int(a.get("score_index", 1)), coord_start=int(a.get("coord_start", 2)),
                       overlap=float(a.get("overlap_thresh", 0.5)), valid_thresh=float(a.get("valid_thresh", 0.0)),
                       background_id=int(a.get("background_id", -1)),
                       per_class=id_index >= 0 and a.get("force_suppress", "False") not in ("True", "true", "1"),
                       center_in=a.get("in_format", "corner") == "center",
                       center_out=a.get("out_format", "corner") == "center")


def _corners(boxes: np.ndarray, center: bool) -> np.ndarray:
    if not center:
        return boxes
    x, y, w, h = (boxes[..., i] for i in range(4))
    return np.stack([x - w / 2, y - h / 2, x + w / 2, y + h / 2], axis=-1)


def _iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every corner box of ``a`` (M, 4) with every one of ``b`` (K, 4), as MXNet's box_nms computes it."""
    area_a = np.clip(a[:, 2] - a[:, 0], 0, None) * np.clip(a[:, 3] - a[:, 1], 0, None)
    area_b = np.clip(b[:, 2] - b[:, 0], 0, None) * np.clip(b[:, 3] - b[:, 1], 0, None)
    w = np.clip(np.minimum(a[:, None, 2], b[None, :, 2]) - np.maximum(a[:, None, 0], b[None, :, 0]), 0, None)
    h = np.clip(np.minimum(a[:, None, 3], b[None, :, 3]) - np.maximum(a[:, None, 1], b[None, :, 1]), 0, None)
    inter = w * h
    union = area_a[:, None] + area_b[None, :] - inter
    return np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)


def suppression_problems(dets: Sequence[np.ndarray], supp: Suppression, rtol: float = RTOL,
                         atol: float = ATOL) -> List[str]:
    """Why the detections ``(ids, scores, boxes)`` are not a greedy suppression of ``supp``'s candidates.

    Greedy NMS keeps candidates in score order, each one unless a kept box of its
    class (any class without ``per_class``) overlaps it by more than ``overlap``.
    With random weights many candidates tie in score to 1e-6 (neighbouring anchors
    of YOLOv3 and SSD), and rounding decides which of a tied pair is kept first;
    that choice changes which later boxes survive, so the kept sets of two exact
    implementations differ. What holds for any order of scores within
    ``atol + rtol`` of each other, checked here, with boxes within ``atol + rtol *
    max|box|`` and IoU within 1e-4 of the threshold:

    1. every detection is a candidate (same id, score and box);
    2. no two detections overlap by more than ``overlap``;
    3. every candidate scoring above the lowest detection (by more than the score
       tolerance) is a detection, or overlaps a detection of its class, scoring
       no lower than it (within the tolerance), by more than ``overlap``.

    Wrong scores, boxes, ids, thresholds or order all break one of the three.
    Detections whose batch differs from the suppression's (Faster R-CNN's, one
    suppression row per class, joined after it) are split into its rows.
    O(batch * (detections * candidates)).

    Returns:
        One line per batch row and rule broken (empty: a valid suppression).
    """
    ids, scores, boxes = (np.asarray(a, np.float64) for a in dets[:3])
    rows = supp.rows.shape[0]
    if ids.shape[0] != rows:
        # Faster R-CNN suppresses each class as a row of its own, and its outputs join the rows.
        assert ids.shape[0] * ids.shape[1] % rows == 0, (ids.shape, supp.rows.shape)
        ids, scores, boxes = (a.reshape(rows, -1, a.shape[-1]) for a in (ids, scores, boxes))
    box_tol = atol + rtol * max(1.0, float(np.abs(supp.rows[..., supp.coord_start:supp.coord_start + 4]).max()))
    score_tol = atol + rtol
    problems: List[str] = []
    for b in range(ids.shape[0]):
        valid = ids[b, :, 0] >= 0
        k_id, k_sc, k_box = ids[b, valid, 0], scores[b, valid, 0], boxes[b][valid]
        c_id, c_sc, c_box = _candidates(supp, b)
        if not len(k_id):
            if len(c_id):
                problems.append(f"batch {b}: no detections of {len(c_id)} candidates")
            continue
        same_id = k_id[:, None] == c_id[None, :]
        found = same_id & (np.abs(k_sc[:, None] - c_sc[None, :]) <= score_tol) \
            & (np.abs(k_box[:, None, :] - c_box[None, :, :]).max(axis=2) <= box_tol)
        if not found.any(axis=1).all():
            problems.append(f"batch {b}: {int((~found.any(axis=1)).sum())} of {len(k_id)} detections are not candidates")
        k_corner, c_corner = _corners(k_box, supp.center_out), _corners(c_box, supp.center_out)
        clash = np.triu(_iou(k_corner, k_corner) > supp.overlap + 1e-4, k=1)
        if supp.per_class:
            clash &= k_id[:, None].astype(np.int64) == k_id[None, :].astype(np.int64)
        if clash.any():
            problems.append(f"batch {b}: {int(clash.sum())} pairs of detections overlap by more than {supp.overlap}")
        above = (c_sc > k_sc.min() + score_tol) & ~found.any(axis=0)
        cover = _iou(c_corner[above], k_corner) > supp.overlap - 1e-4
        cover &= k_sc[None, :] >= c_sc[above][:, None] - score_tol
        if supp.per_class:
            cover &= c_id[above][:, None].astype(np.int64) == k_id[None, :].astype(np.int64)
        missing = int((~cover.any(axis=1)).sum())
        if missing:
            problems.append(f"batch {b}: {missing} candidates above the lowest detection neither kept nor suppressed "
                            f"by a higher detection")
    return problems


def _candidates(supp: Suppression, b: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ids, scores and boxes (in the output's format) of the valid candidates of batch row ``b``."""
    rows = supp.rows[b]
    c_id = rows[:, supp.id_index] if supp.id_index >= 0 else np.zeros(len(rows))
    c_sc = rows[:, supp.score_index]
    keep = (c_sc > supp.valid_thresh) & (c_id >= 0)
    if supp.id_index >= 0:
        keep &= c_id != supp.background_id
    c_box = rows[keep, supp.coord_start:supp.coord_start + 4]
    if supp.center_in != supp.center_out:
        c_box = _corners(c_box, supp.center_in)
        if supp.center_out:
            c_box = np.stack([(c_box[:, 0] + c_box[:, 2]) / 2, (c_box[:, 1] + c_box[:, 3]) / 2,
                              c_box[:, 2] - c_box[:, 0], c_box[:, 3] - c_box[:, 1]], axis=-1)
    return c_id[keep], c_sc[keep], c_box


def detection_problems(ref: Sequence[np.ndarray], got: Sequence[np.ndarray], supp: Suppression,
                       rtol: float = RTOL, atol: float = ATOL, count_share: float = 0.05) -> List[str]:
    """Accelerated detections ``got`` against native's ``ref``, both ``(ids, scores, boxes)``.

    ``got`` must be a valid greedy suppression of native's candidates
    (:func:`suppression_problems`), and keep as many detections as native within
    ``count_share`` (ties change which later boxes survive, not how many, beyond a
    few). Native's own detections pass the same check, or the check is wrong.

    Returns:
        One line per problem (empty: the detections are right).
    """
    bad = [f"native: {p}" for p in suppression_problems(ref, supp, rtol, atol)]
    bad += suppression_problems(got, supp, rtol, atol)
    n_ref = int((np.asarray(ref[0]) >= 0).sum())
    n_got = int((np.asarray(got[0]) >= 0).sum())
    if n_ref == 0 or abs(n_got - n_ref) > count_share * n_ref:
        bad.append(f"{n_got} detections against native's {n_ref}")
    return bad


def match_detections(ref: Sequence[np.ndarray], got: Sequence[np.ndarray], rtol: float = RTOL,
                     atol: float = ATOL) -> Tuple[int, int, int]:
    """One-to-one matches between native and accelerated detections ``(ids, scores, boxes)``.

    A native detection (id >= 0) matches an unused accelerated one with the same
    id, a score within ``atol + rtol`` and a box within ``atol + rtol * max|box|``.

    Returns:
        ``(matched, native detections, accelerated detections)``, over the batch.
    """
    ids_r, sc_r, bx_r = (np.asarray(a) for a in ref[:3])
    ids_g, sc_g, bx_g = (np.asarray(a) for a in got[:3])
    box_tol = atol + rtol * max(1.0, float(np.abs(bx_r).max()))
    matched = total_r = total_g = 0
    for b in range(ids_r.shape[0]):
        used: set = set()
        valid_g = np.where(ids_g[b, :, 0] >= 0)[0]
        total_g += len(valid_g)
        for i in np.where(ids_r[b, :, 0] >= 0)[0]:
            total_r += 1
            for j in valid_g:
                if j in used or ids_g[b, j, 0] != ids_r[b, i, 0]:
                    continue
                if abs(sc_g[b, j, 0] - sc_r[b, i, 0]) <= atol + rtol and np.abs(bx_g[b, j] - bx_r[b, i]).max() <= box_tol:
                    used.add(j)
                    matched += 1
                    break
    return matched, total_r, total_g
