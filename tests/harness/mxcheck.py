"""Shared helpers: run a symbol natively in MXNet and through the ONNX export, and compare.

Tolerances per precision (stated once, used everywhere):

* fp32: ``rtol=1e-4, atol=1e-5`` for single ops; whole models use :data:`MODEL_TOL`.
* fp16: ``rtol=1e-2, atol=1e-2``.
"""
from __future__ import annotations

from typing import Dict, Mapping, Optional, Sequence, Tuple

import numpy as np

#: bfloat16 keeps 8 bits of mantissa (float16 11): products round to about 0.4%, sums stay float32.
OP_TOL = {"float32": (1e-4, 1e-5), "float16": (1e-2, 1e-2), "bfloat16": (3e-2, 2e-2)}
#: Whole models accumulate rounding over ~50 layers: relative to the output range.
MODEL_TOL = {"float32": (1e-3, 1e-4)}


def random_params(sym, shapes: Mapping[str, Tuple[int, ...]], seed: int = 0, dtype: str = "float32"):
    """Seeded random values for every argument and aux state not in ``shapes``.

    Variance-like aux states (``*_var``, ``*moving_var``) are positive.
    """
    import mxnet as mx

    rng = np.random.RandomState(seed)
    arg_shapes, _, aux_shapes = sym.infer_shape(**shapes)
    args = {}
    for name, s in zip(sym.list_arguments(), arg_shapes):
        if name in shapes:
            continue
        args[name] = mx.nd.array(rng.uniform(-1, 1, s), dtype=dtype)
    aux = {}
    for name, s in zip(sym.list_auxiliary_states(), aux_shapes):
        v = rng.uniform(0.5, 1.5, s) if "var" in name else rng.uniform(-0.5, 0.5, s)
        aux[name] = mx.nd.array(v, dtype=dtype)
    return args, aux


def random_inputs(shapes: Mapping[str, Tuple[int, ...]], seed: int = 1, dtype: str = "float32") -> Dict[str, np.ndarray]:
    rng = np.random.RandomState(seed)
    return {k: rng.uniform(-1, 1, s).astype(dtype) for k, s in shapes.items()}


def run_native(sym, shapes, args, aux, inputs, ctx=None, type_dict=None) -> Sequence[np.ndarray]:
    """Bind natively (the pass forced off) and run one inference forward.

    ``type_dict`` defaults to float32 for every argument (as simple_bind does), except
    inputs given as integer or bool arrays, which keep their dtype: the reference
    computes floats in fp32.
    """
    import mxnet as mx

    from mx_trt.frontends import hook

    ctx = ctx or mx.cpu()
    if type_dict is None:
        type_dict = {k: "float32" for k in sym.list_arguments()}
        type_dict.update({k: np.asarray(v).dtype.name for k, v in inputs.items() if np.asarray(v).dtype.kind in "iub"})
    with hook.disabled():
        exe = sym.simple_bind(ctx, grad_req="null", type_dict=type_dict, **shapes)
    exe.copy_params_from(args, aux, allow_extra_params=True)
    for k, v in inputs.items():
        exe.arg_dict[k][:] = v
    exe.forward(is_train=False)
    return [o.asnumpy() for o in exe.outputs]


def run_onnx_whole(sym, shapes, args, aux, inputs, dtypes: Optional[Mapping[str, str]] = None):
    """Export every operator of ``sym`` as one ONNX model and run it in ONNX Runtime.

    Returns ``(outputs, model)``. Raises whatever the exporter raises.
    """
    import onnx
    import onnxruntime as ort

    from mx_trt.graph.importer import symbol_to_graph
    from mx_trt.export.subgraph import embedded_model, export_subgraph
    from mx_trt.passes.ir import Entry

    from mx_trt.export.converters.registry import check
    from mx_trt.export.spec import op_spec

    g = symbol_to_graph(sym, shapes, dtypes)
    # Read-only, as the bind hands converters views of the caller's own arrays.
    weights = {k: _read_only(v.asnumpy()) for k, v in {**args, **aux}.items()}
    ops = g.op_nodes()
    for nid in ops:
        # A conversion counts only if the op's validator accepts it, as at bind time.
        reason = check(op_spec(g, nid, weights))
        assert reason is None, f"validator rejects {g.nodes[nid].op} {g.nodes[nid].name!r}: {reason}"
    in_entries = [Entry(n.id, 0) for n in g.nodes if n.is_variable and n.name in inputs and any(
        e.node == n.id for m in g.nodes for e in m.inputs)]
    exported = export_subgraph(g, ops, in_entries, list(g.heads), weights)
    model = embedded_model(exported)
    onnx.checker.check_model(model)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {n: inputs[n] for n in exported.input_names}
    return sess.run(exported.output_names, feeds), model


def _read_only(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


def check_symbol(
    sym,
    shapes: Mapping[str, Tuple[int, ...]],
    *,
    seed: int = 0,
    dtype: str = "float32",
    tol: Optional[Tuple[float, float]] = None,
    params: Optional[Tuple[dict, dict]] = None,
    inputs: Optional[Mapping[str, np.ndarray]] = None,
):
    """Assert that the ONNX export of ``sym`` matches MXNet on seeded random data.

    Args:
        sym: The symbol (one op or a few).
        shapes: Shapes of the data inputs; every other argument is a weight.
        tol: ``(rtol, atol)``; default :data:`OP_TOL` of the dtype.
        params: ``(args, aux)`` to use instead of random ones.
        inputs: Input arrays to use instead of random ones.
    """
    args, aux = params if params is not None else random_params(sym, shapes, seed, dtype)
    feeds = dict(inputs) if inputs is not None else random_inputs(shapes, seed + 1, dtype)
    ref = run_native(sym, shapes, args, aux, feeds)
    # Inputs keep their own dtypes (integer indices, masks...); weights theirs.
    in_dtypes = {k: np.asarray(v).dtype.name for k, v in feeds.items()}
    in_dtypes.update({k: np.dtype(v.dtype).name for k, v in {**args, **aux}.items()})
    got, _ = run_onnx_whole(sym, shapes, args, aux, feeds, dtypes=in_dtypes)
    rtol, atol = tol or OP_TOL[dtype]
    assert len(got) == len(ref)
    for r, g in zip(ref, got):
        assert r.shape == g.shape, f"shape {g.shape} != MXNet's {r.shape}"
        assert r.dtype == g.dtype, f"dtype {g.dtype} != MXNet's {r.dtype}"
        np.testing.assert_allclose(g, r, rtol=rtol, atol=atol)
    return ref, got


def reason_of(sym, shapes: Mapping[str, Tuple[int, ...]], dtypes: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """The registry's verdict on the last operator of ``sym`` (weights are constants)."""
    from mx_trt.export.converters import check
    from mx_trt.graph.importer import symbol_to_graph
    from mx_trt.export.spec import op_spec

    g = symbol_to_graph(sym, shapes, dtypes)
    nid = g.op_nodes()[-1]
    consts = {n.name: None for n in g.nodes if n.is_variable and n.name not in shapes}
    return check(op_spec(g, nid, consts))
