"""Detection post-processing in the engine against native post-processing (GluonCV SSD).

For one detector at a realistic size (seeded random weights, batch 1), in one
process, the median forward latency of three executors bound from the same
symbol and weights:

* ``native``: MXNet alone;
* ``post native``: the pass with ``box_nms`` excluded (``MXNET_TENSORRT_EXCLUDE_OPS``),
  so the network runs in an engine and suppression, with the slices after it, in MXNet;
* ``post in engine``: the pass with everything in one engine;
* ``network only``: the pass on the graph cut before ``box_nms`` (its input as the
  output), so that each variant's post-processing cost is its time minus this one.

They are timed in rounds that rotate their order (each round starts with an
untimed forward of each), so that load on the shared machine falls on all of
them alike. The suppression alone is timed too: MXNet's ``box_nms`` on the
model's own candidates against the converter's ONNX graph in ONNX Runtime.

    python benchmarks/bench_postprocessing.py --model ssd_512_mobilenet1.0_voc --size 512 --rounds 15
    python benchmarks/bench_postprocessing.py --model faster_rcnn_resnet50_v1b_voc --size 480 --width 640 --rounds 3 --nms 0
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any, Callable, Dict, List

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _bind(model: Any, env: Dict[str, str]) -> Any:
    import mxnet as mx

    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        exe = model.sym.simple_bind(mx.cpu(), grad_req="null", shared_buffer=model.params if env.get(
            "MXNET_USE_TENSORRT") == "1" else None, **model.shapes)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    if env.get("MXNET_USE_TENSORRT") != "1":
        exe.copy_params_from(model.args, model.aux, allow_extra_params=True)
    for k, v in model.inputs.items():
        exe.arg_dict[k][:] = v
    return exe


def _forward(exe: Any) -> Callable[[], None]:
    def run() -> None:
        exe.forward(is_train=False)
        for o in exe.outputs:
            o.wait_to_read()

    return run


def _rounds(runs: Dict[str, Callable[[], None]], rounds: int) -> Dict[str, List[float]]:
    names = list(runs)
    times: Dict[str, List[float]] = {n: [] for n in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for n in order:
            runs[n]()  # untimed
        for n in order:
            t0 = time.perf_counter()
            runs[n]()
            times[n].append(time.perf_counter() - t0)
    return times


def _nms_alone(model: Any, rounds: int, which: int = -1) -> Dict[str, List[float]]:
    """MXNet's box_nms against the converter's ONNX form in ONNX Runtime, on the model's candidates
    (``which``: the index of the box_nms node, in graph order)."""
    import mxnet as mx
    import onnxruntime as ort

    from mx_trt.export.subgraph import embedded_model, export_subgraph
    from mx_trt.frontends.hook import disabled
    from mx_trt.graph.importer import symbol_to_graph
    from mx_trt.passes.ir import Entry

    internals = model.sym.get_internals()
    nms = internals[[o for o in internals.list_outputs() if "box_nms" in o][which]]
    cand_sym = nms.get_children()
    with disabled():
        exe = cand_sym.simple_bind(mx.cpu(), grad_req="null", **model.shapes)
    exe.copy_params_from(model.args, model.aux, allow_extra_params=True)
    exe.arg_dict["data"][:] = model.inputs["data"]
    cand = exe.forward(is_train=False)[0].asnumpy()
    attrs = {k: v for k, v in nms.list_attr().items() if not k.startswith("__")}
    x = mx.nd.array(cand)
    op = mx.sym.contrib.box_nms(mx.sym.var("data"), **attrs)
    g = symbol_to_graph(op, {"data": cand.shape})
    exported = export_subgraph(g, g.op_nodes(), [Entry(0, 0)], list(g.heads), {})
    from mx_trt.builder.backends.onnxruntime import _session_options

    sess = ort.InferenceSession(embedded_model(exported).SerializeToString(), _session_options(),
                                providers=["CPUExecutionProvider"])
    feeds = {exported.input_names[0]: cand}
    ref = mx.nd.contrib.box_nms(x, **attrs).asnumpy()
    got = sess.run(None, feeds)[0]
    assert np.allclose(ref, got, rtol=0, atol=1e-5), "the ONNX form differs from MXNet on the model's candidates"

    def native() -> None:
        mx.nd.contrib.box_nms(x, **attrs).wait_to_read()

    return _rounds({"box_nms native": native, "box_nms onnxruntime": lambda: sess.run(None, feeds)}, rounds)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="ssd_512_mobilenet1.0_voc")
    p.add_argument("--size", type=int, default=512, help="input height and width")
    p.add_argument("--width", type=int, default=0, help="input width, if not --size")
    p.add_argument("--nms", type=int, default=-1, help="which box_nms node to time alone, in graph order (default: the last)")
    p.add_argument("--rounds", type=int, default=15)
    args = p.parse_args()
    from tests.models.thirdparty import gluoncv_model

    import mx_trt

    from tests.models.thirdparty import Model

    width = args.width or args.size
    model = gluoncv_model(args.model, "detection", (args.size, width))
    internals = model.sym.get_internals()
    candidates = internals[[o for o in internals.list_outputs() if "box_nms" in o][-1]].get_children()
    network = Model("network", candidates, model.args, model.aux, model.shapes, model.dtypes, model.inputs, "detection")
    common = {"MXNET_TENSORRT_BACKEND": "onnxruntime", "MXNET_TENSORRT_STRICT": "1"}
    exes = {
        "native": _bind(model, {"MXNET_USE_TENSORRT": "0"}),
        "post native": _bind(model, {**common, "MXNET_USE_TENSORRT": "1", "MXNET_TENSORRT_EXCLUDE_OPS": "_contrib_box_nms"}),
        "post in engine": _bind(model, {**common, "MXNET_USE_TENSORRT": "1"}),
        "network only": _bind(network, {**common, "MXNET_USE_TENSORRT": "1"}),
    }
    partition = {}
    for name, exe in exes.items():
        info = mx_trt.bind_info(exe)
        if info is not None:
            inside, total = info.plan.op_counts()
            native_ops = sorted({info.plan.graph.nodes[v].op for v in info.plan.partition.native})
            partition[name] = {"engines": len(info.engines), "ops_in_engines": f"{inside}/{total}", "native": native_ops}
    load0 = os.getloadavg()
    times = _rounds({n: _forward(e) for n, e in exes.items()}, args.rounds)
    times.update(_nms_alone(model, max(3, args.rounds), args.nms))
    load1 = os.getloadavg()
    med = {n: statistics.median(v) * 1e3 for n, v in times.items()}
    result = {"model": args.model, "input": f"1x3x{args.size}x{width}", "rounds": args.rounds, "median_ms": med,
              "partition": partition, "loadavg_before": load0, "loadavg_after": load1,
              "post native / post in engine": med["post native"] / med["post in engine"],
              "post-processing ms, native": med["post native"] - med["network only"],
              "post-processing ms, in engine": med["post in engine"] - med["network only"],
              "box_nms native / onnxruntime": med["box_nms native"] / med["box_nms onnxruntime"]}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
