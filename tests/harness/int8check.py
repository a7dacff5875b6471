"""Shared helpers of the INT8 tests: tiny graphs exported as a bind does, and a small classifier.

Tolerance of INT8 against native MXNet fp32 (stated once, used everywhere): the
cosine similarity of the outputs is above :data:`COSINE_MIN`, and the top-1 class
agrees on at least :data:`TOP1_MIN` of the samples of :func:`prototype_cnn`, whose
classes are separated by clear margins (the classifier's rows are the features
of one prototype image per class), so a disagreement is an error, not a tie.
"""
from __future__ import annotations

from typing import Any, Dict, Mapping, Tuple

import mxnet as mx
import numpy as np

from mx_trt.builder.backends import select_backend
from mx_trt.export.subgraph import ExportedSubgraph, export_subgraph
from mx_trt.passes.fuse import boundary
from mx_trt.pipeline.plan import Plan, analyze
from mx_trt.pipeline.request import BindRequest
from mx_trt.settings import Settings
from tests.harness.mxcheck import run_native

COSINE_MIN = 0.99
TOP1_MIN = 0.95


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def export_one(sym: Any, shapes: Mapping[str, Tuple[int, ...]], params: Mapping[str, Any]) -> Tuple[Plan, ExportedSubgraph]:
    """The bind's analysis of ``sym`` (engine rule ``always``) and the export of its single subgraph."""
    settings = Settings(engine_rule="always")
    plan = analyze(BindRequest(symbol=sym, shapes=shapes, params=params, settings=settings,
                               backend=select_backend("cpu")))
    assert len(plan.partition.subgraphs) == 1, [s.name for s in plan.partition.subgraphs]
    sg = plan.partition.subgraphs[0]
    ins, outs = boundary(plan.graph, sg.nodes, plan.absorbed_ids())
    weights = {k: v.asnumpy() for k, v in params.items() if k in plan.weights}
    return plan, export_subgraph(plan.graph, sg.nodes, ins, outs, weights, name=sg.name)


def conv_bn_relu(x: Any, name: str, ch: int, stride: int = 1) -> Any:
    c = mx.sym.Convolution(x, num_filter=ch, kernel=(3, 3), pad=(1, 1), stride=(stride, stride), no_bias=True,
                           name=f"{name}_conv")
    b = mx.sym.BatchNorm(c, fix_gamma=False, name=f"{name}_bn")
    return mx.sym.Activation(b, act_type="relu", name=f"{name}_relu")


def cnn_symbol(classes: int = 6) -> Any:
    """conv-bn-relu, max pooling, a residual block, global pooling, a classifier."""
    x = conv_bn_relu(mx.sym.var("data"), "stem", 16)
    x = mx.sym.Pooling(x, kernel=(2, 2), stride=(2, 2), pool_type="max", name="pool")
    y = conv_bn_relu(x, "b1a", 16)
    y = mx.sym.BatchNorm(mx.sym.Convolution(y, num_filter=16, kernel=(3, 3), pad=(1, 1), no_bias=True, name="b1b_conv"),
                         fix_gamma=False, name="b1b_bn")
    x = mx.sym.Activation(mx.sym.elemwise_add(y, x, name="b1_add"), act_type="relu", name="b1_relu")
    x = conv_bn_relu(x, "b2", 64, stride=2)
    x = mx.sym.Pooling(x, global_pool=True, kernel=(1, 1), pool_type="avg", name="gap")
    return mx.sym.FullyConnected(mx.sym.flatten(x, name="flat"), num_hidden=classes, name="fc")


def prototype_cnn(classes: int = 6, size: int = 16, seed: int = 0) -> Dict[str, Any]:
    """A small CNN that classifies noisy copies of ``classes`` prototype images (gratings).

    Convolutions have He-scaled seeded weights and BatchNorm realistic statistics;
    the classifier's rows are the centred, normalized features of each prototype,
    so each class wins on its own samples by a clear margin.

    Returns:
        ``sym``, ``args``, ``aux``, ``protos`` (the prototypes), and ``sample(n, seed)``
        giving ``(images, labels)``.
    """
    rng = np.random.RandomState(seed)
    sym = cnn_symbol(classes)
    shapes = {"data": (1, 3, size, size)}
    arg_shapes, _, aux_shapes = sym.infer_shape(**shapes)
    args: Dict[str, Any] = {}
    for name, s in zip(sym.list_arguments(), arg_shapes):
        if name == "data":
            continue
        if name.endswith("weight") and len(s) == 4:
            v = rng.normal(0, np.sqrt(2.0 / np.prod(s[1:])), s)
        elif name.endswith("gamma"):
            v = rng.uniform(0.8, 1.2, s)
        else:
            v = rng.normal(0, 0.05, s)
        args[name] = mx.nd.array(v.astype(np.float32))
    aux = {name: mx.nd.array((rng.uniform(0.5, 1.5, s) if "var" in name else rng.normal(0, 0.1, s)).astype(np.float32))
           for name, s in zip(sym.list_auxiliary_states(), aux_shapes)}
    # Distinct prototypes: gratings of one orientation and frequency per class, in one colour mix each.
    yy, xx = np.mgrid[0:size, 0:size] / size
    protos = np.empty((classes, 3, size, size), np.float32)
    for k in range(classes):
        angle, freq = np.pi * k / classes, 1 + k % 3
        wave = np.sin(2 * np.pi * freq * (xx * np.cos(angle) + yy * np.sin(angle)))
        protos[k] = rng.uniform(0.2, 1.0, (3, 1, 1)) * wave[None]
    # Features of the prototypes, natively: the body without the classifier.
    body = sym.get_internals()["flat_output"]
    feats = run_native(body, {"data": protos.shape}, {k: v for k, v in args.items() if k in body.list_arguments()},
                       aux, {"data": protos})[0]
    mean = feats.mean(axis=0)
    w = (feats - mean) / np.linalg.norm(feats - mean, axis=1, keepdims=True)
    args["fc_weight"] = mx.nd.array(w.astype(np.float32))
    args["fc_bias"] = mx.nd.array((-w @ mean).astype(np.float32))  # logits = <f(x) - mean, w_k>

    def sample(n: int, seed: int = 1) -> Tuple[np.ndarray, np.ndarray]:
        r = np.random.RandomState(seed)
        labels = r.randint(0, classes, n)
        images = protos[labels] + r.normal(0, 0.1, (n, 3, size, size)).astype(np.float32)
        return images.astype(np.float32), labels

    return {"sym": sym, "args": args, "aux": aux, "protos": protos, "sample": sample}
