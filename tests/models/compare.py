"""Comparing an accelerated model with native MXNet, engine by engine and output by output.

Two checks, both against MXNet's own values for the same graph and weights:

* :func:`check_engines`: every engine is fed the values native MXNet computes
  for its inputs and must produce native's values of its outputs. Upstream
  rounding cannot hide or excuse an error here, so this is the strict check of
  each converted subgraph (fp32: ``|got - ref| <= atol + rtol * max|ref|`` per tensor).
* :func:`compare_outputs`: the final outputs, with detection outputs (rows of
  ``[id, score, box...]`` padded with -1) compared as sets, since detections
  that tie in score may come out in another order.
"""
from __future__ import annotations

import json
from typing import Any, Dict, List, Mapping, Sequence, Tuple

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
                  min_match: float = 0.0) -> List[str]:
    """Run every engine of ``exe`` on native MXNet's values of its inputs; return the mismatches.

    ``as_sets`` compares each float output as a set of rows (see :func:`_rows`): for
    engines that sort tied scores (MXNet's CPU sort is unstable, so any order of
    equal keys is as right as another).

    ``min_match`` > 0: an engine that computes the model's detections (graph outputs
    0-2, ids, scores and boxes after suppression) has them matched one to one with
    native's (:func:`match_detections`), at least this share of each side; its other
    outputs are compared as usual. Suppression turns rounding differences upstream
    of it into other kept boxes, so elementwise equality is not the measure there.

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
        if min_match > 0 and all(h in got for h in heads):
            matched, n_ref, n_got = match_detections([ref[h] for h in heads], [got[h] for h in heads])
            if n_ref == 0 or matched < min_match * n_ref or matched < min_match * n_got:
                bad.append(f"{fused.name}: {matched} detections matched of {n_ref} native and {n_got} in the engine")
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
