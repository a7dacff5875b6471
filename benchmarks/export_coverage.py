"""Which models export whole to ONNX (``mx_trt.export_onnx``), and ONNX Runtime alone against native MXNet.

Coverage: every model of the ``models`` benchmark (``bench_models.py``: GluonCV and
GluonNLP, plus its synthetic islands) and the model-zoo classifiers of ``end_to_end``,
at small inputs with seeded random weights. Each is exported with the default options
(fp32, batch-dynamic where the graph allows it); a model that exports whole is run
by ONNX Runtime on the model's seeded input and compared with native MXNet (largest
absolute difference over the largest absolute output); one that does not gets its
first reasons, one per operator type.

Latency (``--latency NAMES``): for each named model, native MXNet against ONNX Runtime
running the exported file, batch 1, in one process, the two timed in alternating
rounds so that load on the machine falls on both alike; medians.

    python benchmarks/export_coverage.py                     # the coverage table
    python benchmarks/export_coverage.py --only resnet18_v1,bert_12_768_12
    python benchmarks/export_coverage.py --latency resnet50_v1,mobilenetv2_1.0,bert_12_768_12 --runs 20
"""
from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # this checkout's mx_trt and tests

logger = logging.getLogger("benchmarks.export_coverage")

#: Model-zoo classifiers of the end_to_end benchmark.
ZOO = ("resnet18_v1", "resnet50_v1", "mobilenetv2_1.0", "squeezenet1.1", "densenet121", "inceptionv3")


def _zoo(name: str, size: int) -> Any:
    """A model-zoo classifier as a :class:`tests.models.thirdparty.Model` at ``size`` x ``size``."""
    import numpy as np

    from tests.models.test_model_zoo import zoo_model
    from tests.models.thirdparty import Model

    sym, args, aux, _ = zoo_model(name, size=size)
    shape = (1, 3, size, size)
    x = np.random.RandomState(1).uniform(-1, 1, shape).astype("float32")
    return Model(name, sym, args, aux, {"data": shape}, {"data": "float32"}, {"data": x}, "classification")


def builders() -> Dict[str, Tuple[Callable[[], Any], str]]:
    """name -> (builder, input); the ``models`` benchmark's names at small inputs, then the zoo."""
    from bench_models import _islands
    from tests.models.thirdparty import bert_model, gluoncv_model

    def det(name: str, size: Tuple[int, int]) -> Callable[[], Any]:
        return lambda: gluoncv_model(name, "detection", size)

    def seg(name: str) -> Callable[[], Any]:
        return lambda: gluoncv_model(name, "segmentation", (128, 128), aux=False, base_size=128, crop_size=128)

    out: Dict[str, Tuple[Callable[[], Any], str]] = {
        "ssd_512_resnet50_v1_voc": (det("ssd_512_resnet50_v1_voc", (128, 128)), "1x3x128x128"),
        "ssd_512_mobilenet1.0_voc": (det("ssd_512_mobilenet1.0_voc", (128, 128)), "1x3x128x128"),
        "yolo3_darknet53_voc": (det("yolo3_darknet53_voc", (128, 128)), "1x3x128x128"),
        "yolo3_mobilenet1.0_voc": (det("yolo3_mobilenet1.0_voc", (128, 128)), "1x3x128x128"),
        "faster_rcnn_resnet50_v1b_voc": (det("faster_rcnn_resnet50_v1b_voc", (128, 128)), "1x3x128x128"),
        "fcn_resnet50_voc": (seg("fcn_resnet50_voc"), "1x3x128x128"),
        "psp_resnet50_ade": (seg("psp_resnet50_ade"), "1x3x128x128"),
        "deeplab_resnet50_ade": (seg("deeplab_resnet50_ade"), "1x3x128x128"),
        "simple_pose_resnet18_v1b": (lambda: gluoncv_model("simple_pose_resnet18_v1b", "pose", (128, 96)), "1x3x128x96"),
        "i3d_resnet50_v1_kinetics400": (lambda: gluoncv_model("i3d_resnet50_v1_kinetics400", "video", (64, 64), video=8),
                                        "1x3x8x64x64"),
        "bert_12_768_12": (lambda: bert_model(seq_len=32), "1x32 tokens"),
        "islands (synthetic)": (_islands, "1x256"),
    }
    from tests.models.test_model_zoo import zoo_size

    for name in ZOO:
        size = zoo_size(name)  # the smallest input each takes (fixed pooling windows need their ImageNet size)
        out[name] = ((lambda n=name, s=size: _zoo(n, s)), f"1x3x{size}x{size}")
    return out


def _native(model: Any) -> Tuple[Any, Dict[str, Any]]:
    """A native MXNet executor of the model with its inputs set, and its outputs by name."""
    import mxnet as mx

    from mx_trt.frontends.hook import disabled

    with disabled():
        exe = model.sym.simple_bind(mx.cpu(), grad_req="null", type_dict=model.dtypes, **model.shapes)
    exe.copy_params_from(model.args, model.aux, allow_extra_params=True)
    for k, v in model.inputs.items():
        exe.arg_dict[k][:] = v
    exe.forward(is_train=False)
    return exe, {n: o.asnumpy() for n, o in zip(model.sym.list_outputs(), exe.outputs)}


def _session(path: str, threads: int) -> Any:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    if threads:
        opts.intra_op_num_threads = threads
    return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])


def _first_reasons(operators: List[Tuple[str, str, str]], limit: int = 3) -> str:
    """One reason per operator type, the first ``limit`` types, with counts."""
    by_op: Dict[str, Tuple[int, str]] = {}
    for _, op, why in operators:
        n, first = by_op.get(op, (0, why))
        by_op[op] = (n + 1, first)
    parts = [f"{op} x{n}: {why.split(';')[0][:160]}" for op, (n, why) in list(by_op.items())[:limit]]
    return "; ".join(parts) + (f"; +{len(by_op) - limit} more op types" if len(by_op) > limit else "")


def coverage(name: str, build: Callable[[], Any], size: str) -> Dict[str, Any]:
    """Export one model; run the file against native MXNet when it is whole."""
    import numpy as np

    import mx_trt
    from mx_trt.errors import MxTrtError, NotConvertibleError

    row: Dict[str, Any] = {"model": name, "input": size}
    t0 = time.perf_counter()
    model = build()
    row["ops"] = sum(1 for n in model.sym.tojson().split('"op": ')[1:] if not n.startswith('"null"'))
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "model.onnx")
        try:
            result = mx_trt.export_onnx(model.sym, model.params, model.shapes, path, type_dict=model.dtypes)
        except NotConvertibleError as exc:
            row.update(whole=False, native_ops=len(exc.operators), why=_first_reasons(exc.operators))
            return row
        except MxTrtError as exc:
            row.update(whole=False, native_ops=None, why=f"export failed: {exc}"[:200])
            return row
        row.update(whole=True, dynamic=result.batch_dynamic, mb=result.bytes / 1e6, why=result.static_reason or "")
        _, want = _native(model)
        got = _session(path, 0).run(None, {k: v.astype(model.dtypes.get(k, "float32")) for k, v in model.inputs.items()
                                           if k in {i[0] for i in result.inputs}})
        errs = [float(np.abs(g - w).max() / max(float(np.abs(w).max()), 1e-30)) for g, w in zip(got, want.values())]
        row["rel_err"] = max(errs) if errs else 0.0
        if getattr(model, "kind", "") == "detection":  # ties move whole rows: match detections one to one
            from tests.models.compare import match_detections

            matched, n_native, n_onnx = match_detections(list(want.values()), got)
            row["matched"] = f"{matched} of {n_native} native / {n_onnx} exported detections matched"
    row["seconds"] = time.perf_counter() - t0
    return row


def latency(name: str, build: Callable[[], Any], runs: int, threads: int) -> Dict[str, Any]:
    """Median ms of native MXNet and of ONNX Runtime on the exported file, in alternating rounds."""
    import mx_trt

    model = build()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "model.onnx")
        mx_trt.export_onnx(model.sym, model.params, model.shapes, path, type_dict=model.dtypes)
        session = _session(path, threads)
        exe, _ = _native(model)
        feeds = {i.name: model.inputs[i.name].astype(model.dtypes.get(i.name, "float32")) for i in session.get_inputs()}
        times: Dict[str, List[float]] = {"native": [], "onnxruntime": []}

        def native_once() -> float:
            t = time.perf_counter()
            exe.forward(is_train=False)
            for o in exe.outputs:
                o.wait_to_read()
            return (time.perf_counter() - t) * 1e3

        def ort_once() -> float:
            t = time.perf_counter()
            session.run(None, feeds)
            return (time.perf_counter() - t) * 1e3

        for _ in range(2):  # warm-up
            native_once()
            ort_once()
        for k in range(runs):
            order = [("native", native_once), ("onnxruntime", ort_once)]
            for label, fn in (order if k % 2 == 0 else order[::-1]):
                times[label].append(fn())
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"model": name, "native_ms": med["native"], "ort_ms": med["onnxruntime"],
            "ratio": med["native"] / med["onnxruntime"]}


def render_coverage(rows: List[Dict[str, Any]]) -> str:
    lines = ["| model | input | operators | whole | batch-dynamic | ONNX Runtime vs native (max abs diff / max abs output) "
             "| operators that do not convert (first reasons), or why the batch is static |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["whole"]:
            lines.append(f"| {r['model']} | {r['input']} | {r['ops']} | yes | {'yes' if r['dynamic'] else 'no'} "
                         f"| {r['rel_err']:.1e}{'; ' + r['matched'] if r.get('matched') else ''} "
                         f"| {'static: ' + r['why'] if r['why'] else ''} |")
        else:
            n = r.get("native_ops")
            lines.append(f"| {r['model']} | {r['input']} | {r['ops']} | no | | "
                         f"| {'' if n is None else f'{n}: '}{r['why']} |")
    return "\n".join(lines)


def render_latency(rows: List[Dict[str, Any]]) -> str:
    lines = ["| model | native MXNet ms | ONNX Runtime alone ms | native / ONNX Runtime |", "|---|---|---|---|"]
    lines += [f"| {r['model']} | {r['native_ms']:.1f} | {r['ort_ms']:.1f} | {r['ratio']:.2f} |" for r in rows]
    return "\n".join(lines)


def main(argv: Any = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default=None, help="comma-separated model names (default: all)")
    ap.add_argument("--latency", default=None, help="comma-separated model names to time instead")
    ap.add_argument("--latency-size", type=int, default=224, help="image size of the zoo models timed (default 224)")
    ap.add_argument("--runs", type=int, default=20, help="timed rounds per model (--latency)")
    ap.add_argument("--threads", type=int, default=0, help="ONNX Runtime's threads (0: its default)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    os.environ.setdefault("MXNET_SUBGRAPH_VERBOSE", "0")
    table = builders()
    if args.latency:
        rows = []
        for name in args.latency.split(","):
            build = (lambda n=name: _zoo(n, args.latency_size)) if name in ZOO else table[name][0]
            rows.append(latency(name, build, args.runs, args.threads))
            print(render_latency(rows[-1:]).splitlines()[-1], flush=True)
        print(render_latency(rows))
        return 0
    names = args.only.split(",") if args.only else list(table)
    rows = []
    for name in names:
        build, size = table[name]
        rows.append(coverage(name, build, size))
        print(render_coverage(rows[-1:]).splitlines()[-1], flush=True)
    print()
    print(render_coverage(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
