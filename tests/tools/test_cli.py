"""``mxtrt`` end to end on tiny checkpoints written to a temporary folder.

The main model has a user Python custom op in the middle, so it partitions
into two subgraphs around one native node::

    data -> a_conv -> a_relu -> [sq] -> b_conv -> b_relu -> fc

The second one (``plain``) converts entirely, so ``bench`` can time it as one engine.
The CLI runs in-process through ``main(argv)``, and once as ``python -m mx_trt.tools.cli``.
"""
from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import mxnet as mx
import numpy as np
import pytest

from mx_trt.builder.backends import onnxruntime as ort_backend
from mx_trt.tools.cli.main import main
from mx_trt.tools.cli.timing import Progress
from tests.harness import userops
from tests.harness.mxcheck import random_params

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHAPE = ["--shape", "data=1,3,8,8"]


def conv_relu(x, name):
    c = mx.sym.Convolution(x, num_filter=4, kernel=(3, 3), pad=(1, 1), name=f"{name}_conv")
    return mx.sym.Activation(c, act_type="relu", name=f"{name}_relu")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("ckpt")
    x = mx.sym.var("data")
    net = mx.sym.FullyConnected(conv_relu(userops.square(conv_relu(x, "a"), "sq"), "b"), num_hidden=10, name="fc")
    plain = mx.sym.FullyConnected(conv_relu(x, "a"), num_hidden=10, name="fc")
    out = {}
    for name, sym in (("net", net), ("plain", plain)):
        args, aux = random_params(sym, {"data": (1, 3, 8, 8)})
        prefix = str(d / name)
        mx.model.save_checkpoint(prefix, 3, sym, args, aux)
        out[name] = prefix
    return out


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    got = capsys.readouterr()
    return code, got.out, got.err


def test_partition_table(models, capsys):
    code, out, err = run(capsys, "partition", models["net"], *SHAPE)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith(f"model: {models['net']}  inputs: data (1, 3, 8, 8)  backend: onnxruntime")
    assert lines[1].startswith("operators: 5 of 6 in 2 engines (83.3%); multiply-adds (estimated): ")
    rows = [ln.split() for ln in lines if ln.lstrip().startswith(("0 ", "1 "))]
    assert rows[0][:7] == ["0", "trt_subgraph_0", "2", "1", "data", "1", "a_relu"]
    assert rows[1][:7] == ["1", "trt_subgraph_1", "3", "1", "sq", "1", "fc"]
    assert "  Custom (1)" in lines
    assert "    no converter for custom operator user_square (add one with mx_trt.register_converter('Custom:user_square')): sq" in lines


def test_partition_json_svg_html(models, capsys, tmp_path):
    svg, page = tmp_path / "g.svg", tmp_path / "g.html"
    code, out, err = run(capsys, "partition", models["net"], *SHAPE, "--json", "--svg", svg, "--html", page)
    assert code == 0, err
    data = json.loads(out)
    assert [s["nodes"] for s in data["subgraphs"]] == [["a_conv", "a_relu"], ["b_conv", "b_relu", "fc"]]
    assert all(s["engine"] for s in data["subgraphs"])
    assert data["native"] == {"Custom": [{"node": "sq", "reason": "no converter for custom operator user_square (add one with mx_trt.register_converter('Custom:user_square'))"}]}
    assert data["ops"] == {"total": 6, "in_engines": 5, "share": 5 / 6}
    assert data["macs"]["in_engines"] == data["macs"]["total"] > 0
    root = ET.parse(svg).getroot()
    ns = "{http://www.w3.org/2000/svg}"
    fills = {}
    for g in root.iter(f"{ns}g"):
        if g.get("class") == "op":
            fills.setdefault(g.get("data-subgraph"), set()).add(g.find(f"{ns}rect").get("fill"))
    assert sorted(fills) == ["trt_subgraph_0", "trt_subgraph_1"]
    assert all(len(v) == 1 for v in fills.values()) and len(set.union(*fills.values())) == 2
    reasons = [g.get("data-reason") for g in root.iter(f"{ns}g") if g.get("class") == "native"]
    assert reasons == ["no converter for custom operator user_square (add one with mx_trt.register_converter('Custom:user_square'))"]
    assert "<svg" in page.read_text() and "wrote" in err


def test_partition_build_and_exclude(models, capsys, monkeypatch):
    monkeypatch.setenv("MXNET_TENSORRT_EXCLUDE_OPS", "FullyConnected")
    code, out, err = run(capsys, "partition", models["net"], *SHAPE, "--build", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert [s["nodes"] for s in data["subgraphs"]] == [["a_conv", "a_relu"], ["b_conv", "b_relu"]]
    assert data["native"]["FullyConnected"] == [
        {"node": "fc", "reason": "FullyConnected is listed in MXNET_TENSORRT_EXCLUDE_OPS"}]


def test_verify_pass(models, capsys):
    code, out, err = run(capsys, "verify", models["net"], *SHAPE, "--seed", "3")
    assert code == 0, err
    assert "seed 3" in out and "2 engine(s) holding 5 of 6 operators" in out
    row = next(ln for ln in out.splitlines() if ln.startswith("fc_output"))
    assert row.split()[1] == "1x10" and row.split()[-1] == "pass"
    assert out.splitlines()[-1].startswith("PASS: 1 of 1 outputs within")


def _perturbing_run(original):
    def run(self, inputs, outputs):
        original(self, inputs, outputs)
        for b in outputs:
            n = int(np.prod(b.shape))
            arr = np.ctypeslib.as_array((ctypes.c_float * n).from_address(b.ptr))
            arr += 0.5
    return run


def test_verify_fails_with_exit_1(models, capsys, monkeypatch):
    monkeypatch.setattr(ort_backend.OrtEngine, "run", _perturbing_run(ort_backend.OrtEngine.run))
    code, out, err = run(capsys, "verify", models["net"], *SHAPE, "--json")
    assert code == 1, err
    data = json.loads(out)
    assert data["pass"] is False and data["precision"] == "float32"
    (o,) = data["outputs"]
    assert o["name"] == "fc_output" and not o["pass"] and o["max_abs_err"] > 0.1 and o["cosine"] < 1.0


def test_verify_zero_tolerance_and_table(models, capsys, monkeypatch):
    monkeypatch.setattr(ort_backend.OrtEngine, "run", _perturbing_run(ort_backend.OrtEngine.run))
    code, out, _ = run(capsys, "verify", models["net"], *SHAPE, "--rtol", "0", "--atol", "1e9")
    assert code == 0 and "set by --rtol/--atol" in out
    code, out, _ = run(capsys, "verify", models["net"], *SHAPE, "--rtol", "0", "--atol", "0")
    assert code == 1 and out.splitlines()[-1].startswith("FAIL: 0 of 1 outputs")


def test_verify_user_inputs(models, capsys, tmp_path):
    x = np.random.RandomState(0).uniform(-1, 1, (2, 3, 8, 8)).astype("float32")
    np.save(tmp_path / "x.npy", x)
    np.savez(tmp_path / "x.npz", data=x)
    for path in ("x.npy", "x.npz"):
        code, out, err = run(capsys, "verify", models["net"], "--input", tmp_path / path, "--json")
        assert code == 0, err
        data = json.loads(out)
        assert data["inputs"] == {"data": [2, 3, 8, 8]} and data["outputs"][0]["shape"] == [2, 10]


def test_bench_json(models, capsys):
    code, out, err = run(capsys, "bench", models["net"], *SHAPE, "--batch", "1,2", "--runs", "2", "--warmup", "0",
                         "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["runs"] == 2 and data["backend"] == "onnxruntime"
    assert [r["batch"] for r in data["results"]] == [1, 2]
    r = data["results"][1]
    assert r["shapes"] == {"data": [2, 3, 8, 8]}
    for key in ("native", "accelerated"):
        assert set(r[key]) == {"median_ms", "min_ms", "p90_ms", "mean_ms", "throughput", "runs"} and r[key]["runs"] == 2
    assert r["whole_model"] is None and "1 of 6 operators stay native" in r["whole_model_note"]
    assert r["ratios"]["native/accelerated"] > 0 and r["ratios"]["accelerated/whole_model"] is None
    assert r["ratios"]["accelerated/whole_model_best"] is None
    assert "batch 1: binding natively" in err  # progress as log lines when stderr is not a terminal


def test_bench_whole_model_table(models, capsys):
    code, out, err = run(capsys, "bench", models["plain"], *SHAPE, "--runs", "2", "--warmup", "1")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[1].startswith("native: MXNet's own threads") and "OMP_NUM_THREADS=" in lines[1]
    head = lines[2].split()
    assert head[:4] == ["batch", "native", "ms", "p90"] and head[5] == "native" and head[6].endswith("t")
    cells = lines[4].split()
    # batch, three cells for each of native, native at equal threads, accelerated, accelerated at equal
    # threads, whole model, three ratios
    assert cells[0] == "1" and len(cells) == 19 and all(c != "-" for c in cells)
    assert float(cells[-2]) > 0  # native at equal threads / accelerated at equal threads
    assert head[14:16] == ["accel", head[6]]
    kept = [ln for ln in lines if ln.startswith("batch 1: engines kept")]
    assert kept and "default: onnxruntime" in kept[0] and "equal threads:" in kept[0]


def test_bench_control_times_native_mxnet_against_itself(models, capsys):
    """``--control``: native MXNet bound a second time, timed in the same rounds at both thread counts."""
    code, out, err = run(capsys, "bench", models["plain"], *SHAPE, "--runs", "2", "--warmup", "0", "--no-whole",
                         "--control", "--json")
    assert code == 0, err
    r = json.loads(out)["results"][0]
    for key in ("native_control", "native_control_equal_threads"):
        assert r[key]["runs"] == 2 and r[key]["median_ms"] > 0
    ratios = r["ratios"]
    assert ratios["native/native_control"] == pytest.approx(r["native"]["median_ms"] / r["native_control"]["median_ms"])
    assert ratios["native_equal_threads/native_control_equal_threads"] > 0
    code, out, err = run(capsys, "bench", models["plain"], *SHAPE, "--runs", "2", "--warmup", "0", "--no-whole",
                         "--control")
    assert code == 0, err
    head = out.splitlines()[2].split()
    assert head[-3:] == ["A/A", "A/A", head[6]] and "A/A: native MXNet against itself" in out
    code, out, err = run(capsys, "bench", models["plain"], *SHAPE, "--runs", "1", "--warmup", "0", "--no-whole",
                         "--no-equal-threads", "--json")
    assert code == 0, err
    r = json.loads(out)["results"][0]
    assert r["native_control"] is None and r["ratios"]["native/native_control"] is None  # not asked for


def test_bench_precision_reaches_the_equal_threads_workers(models, capsys, monkeypatch):
    """``--precision bf16`` is not in the environment: the workers binding at equal threads are told it too."""
    from mx_trt.tools.cli import bench

    seen = []

    def workers(*args, **kwargs):
        seen.append(kwargs.get("env"))
        return {}, {"accelerated": "not started by this test"}

    monkeypatch.setattr(bench, "equal_thread_workers", workers)
    code, out, err = run(capsys, "bench", models["plain"], *SHAPE, "--runs", "1", "--warmup", "0", "--no-whole",
                         "--precision", "bf16", "--json")
    assert code == 0, err
    assert seen == [{"MXNET_TENSORRT_PRECISION": "bf16", "MXNET_TENSORRT_USE_FP16": None}]


def test_a_workers_environment_takes_the_callers_overrides(models, monkeypatch):
    from mx_trt.tools.native_process import NativeProcess

    monkeypatch.delenv("MXNET_TENSORRT_BACKEND", raising=False)
    sym, args, aux = mx.model.load_checkpoint(models["plain"], 3)
    x = np.ones((1, 3, 8, 8), "float32")
    with NativeProcess(sym, {**args, **aux}, {"data": (1, 3, 8, 8)}, {"data": x}, accelerated=True, threads=1,
                       env={"MXNET_TENSORRT_ENGINE_RULE": "always", "MXNET_TENSORRT_BACKEND": "openvino",
                            "MXNET_TENSORRT_CACHE_DIR": ""}) as w:
        assert w.engines == 1 and w.backends == ["openvino"]  # this process's default backend is onnxruntime


def test_bf16_is_a_precision_of_the_command_line_and_of_verify(models, capsys, monkeypatch):
    from mx_trt.settings import Settings
    from mx_trt.tools.cli import verify
    from mx_trt.tools.cli.bench import precision_env

    assert verify.TOLERANCES["bfloat16"][0] > verify.TOLERANCES["float16"][0]
    env = precision_env(Settings(bf16=True))
    assert env == {"MXNET_TENSORRT_PRECISION": "bf16", "MXNET_TENSORRT_USE_FP16": None}
    assert precision_env(Settings(int8=True, calibration="t.json"))["MXNET_TENSORRT_CALIBRATION"] == "t.json"
    monkeypatch.setenv("MXNET_TENSORRT_BACKEND", "openvino")
    monkeypatch.setenv("MXNET_TENSORRT_ENGINE_RULE", "always")
    code, out, err = run(capsys, "verify", models["plain"], *SHAPE, "--precision", "bf16", "--json")
    assert code == 0, err
    got = json.loads(out)
    assert got["precision"] == "bfloat16" and (got["rtol"], got["atol"]) == verify.TOLERANCES["bfloat16"]


def test_progress_bar_on_a_terminal():
    class Tty:
        def __init__(self):
            self.text = ""

        def isatty(self):
            return True

        def write(self, s):
            self.text += s

        def flush(self):
            pass

    stream = Tty()
    p = Progress(4, stream=stream)
    p.phase("timing")
    p.advance(2)
    p.close()
    assert "\r[" in stream.text and "100.0%" in stream.text and stream.text.endswith("\n")


BAD = [
    ("missing symbol", ["partition", "{dir}/nope", *SHAPE], "no symbol file"),
    ("missing epoch", ["partition", "{net}", *SHAPE, "--epoch", "7"], "no params file"),
    ("malformed shape", ["partition", "{net}", "--shape", "data=1,x,8"], "expected NAME=d0,d1,..."),
    ("no equals sign", ["verify", "{net}", "--shape", "data"], "expected NAME=d0,d1,..."),
    ("zero dim", ["bench", "{net}", "--shape", "data=0,3,8,8"], "positive integers"),
    ("shape does not fit", ["partition", "{net}", "--shape", "data=1,3,9,9"], "do not fit the model"),
    ("wrong rank", ["verify", "{net}", "--shape", "data=1,3,8"], "do not fit the model"),
    ("unknown input", ["partition", "{net}", "--shape", "image=1,3,8,8"], "unknown input 'image'"),
    ("weight as input", ["partition", "{net}", "--shape", "fc_weight=10,256"], "is a weight stored"),
    ("no shape", ["partition", "{net}"], "no shape for input 'data'"),
    ("shape twice", ["partition", "{net}", *SHAPE, *SHAPE], "given twice"),
    ("bad batch", ["bench", "{net}", *SHAPE, "--batch", "1,,x"], "--batch"),
    ("missing input file", ["verify", "{net}", "--input", "{dir}/none.npz"], "no such file"),
    ("npz without the input", ["verify", "{net}", "--input", "{dir}/other.npz"], "no array for input 'data'"),
    ("input contradicts shape", ["verify", "{net}", "--shape", "data=2,3,8,8", "--input", "{dir}/x.npy"],
     "but --shape says"),
    ("unknown option", ["partition", "{net}", *SHAPE, "--frobnicate"], "unrecognized arguments"),
    ("unknown command", ["frobnicate", "{net}"], "invalid choice"),
    ("no command", [], "required"),
    ("bad module", ["partition", "{net}", *SHAPE, "--import", "no_such_module_xyz"], "No module named"),
    ("bad ctx", ["partition", "{net}", *SHAPE, "--ctx", "tpu"], "--ctx"),
    ("unwritable svg", ["partition", "{net}", *SHAPE, "--svg", "{dir}/no/such/dir/g.svg"], "cannot write"),
]
ENV = {"bad env": ({"MXNET_TENSORRT_MIN_SUBGRAPH_SIZE": "two"}, ["partition", "{net}", *SHAPE],
                   "MXNET_TENSORRT_MIN_SUBGRAPH_SIZE='two'")}


@pytest.mark.parametrize("env, argv, expect", [pytest.param({}, a, e, id=i) for i, a, e in BAD]
                         + [pytest.param(*v, id=k) for k, v in ENV.items()])
def test_bad_input_exit_2(models, capsys, monkeypatch, tmp_path, env, argv, expect):
    np.save(tmp_path / "x.npy", np.zeros((1, 3, 8, 8), "float32"))
    np.savez(tmp_path / "other.npz", image=np.zeros((1, 3, 8, 8), "float32"))
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    argv = [a.format(dir=tmp_path, net=models["net"]) for a in argv]
    code, out, err = run(capsys, *argv)
    assert code == 2
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("mxtrt: error: ") and expect in lines[0]
    assert "Traceback" not in err and out == ""


def test_unregistered_custom_op(tmp_path, capsys):
    doc = {"nodes": [{"op": "null", "name": "data", "inputs": []},
                     {"op": "Custom", "name": "c", "attrs": {"op_type": "not_registered_anywhere"}, "inputs": [[0, 0, 0]]}],
           "arg_nodes": [0], "node_row_ptr": [0, 1, 2], "heads": [[1, 0, 0]], "attrs": {"mxnet_version": ["int", 10901]}}
    (tmp_path / "m-symbol.json").write_text(json.dumps(doc))
    mx.nd.save(str(tmp_path / "m-0000.params"), {})
    code, _, err = run(capsys, "partition", tmp_path / "m", *SHAPE)
    assert code == 2 and "custom operator 'not_registered_anywhere'" in err and "--import" in err


def test_subprocess_exit_status(models, tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT)
    bad = subprocess.run([sys.executable, "-m", "mx_trt.tools.cli", "partition", str(tmp_path / "missing"), *SHAPE],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [f"mxtrt: error: no symbol file {tmp_path / 'missing'}-symbol.json "
                                               "(give the checkpoint prefix, without -symbol.json)"]
    ok = subprocess.run([sys.executable, "-m", "mx_trt.tools.cli", "verify", models["net"], *SHAPE,
                         "--import", os.path.join(ROOT, "tests", "harness", "userops.py")],
                        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert "PASS" in ok.stdout and "Traceback" not in ok.stderr


def test_build_fills_the_plan_cache(models, capsys, tmp_path):
    cache = tmp_path / "plans"
    code, out, err = run(capsys, "build", models["net"], *SHAPE, "--batch", "1,2", "--cache-dir", cache, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["cache_dir"] == str(cache)
    assert [(r["batch"], r["engines"], r["built"], r["cached"]) for r in data["batches"]] == [(1, 2, 2, 0), (2, 2, 2, 0)]
    code, out, err = run(capsys, "build", models["net"], *SHAPE, "--batch", "2", "--cache-dir", cache)
    assert code == 0, err
    assert "batch 2: 2 engine(s): 0 built and stored, 2 already in the cache" in out


def test_build_and_partition_show_the_measured_decisions(models, capsys, tmp_path, monkeypatch):
    from mx_trt.builder import backends
    from mx_trt.pipeline import measure, plan

    # One CPU candidate (ONNX Runtime), whether or not OpenVINO is installed: the expected lines name it.
    monkeypatch.setitem(backends.PREFERENCE, "cpu", ["onnxruntime"])
    # The model's tiny subgraphs go to the timer although the estimate would rule them out.
    monkeypatch.setattr(plan, "keep_worthwhile", lambda graph, part: part)
    # A deterministic timer: MXNet 2 ms, the engine 1 ms (the rule itself: tests/pipeline/test_measured.py).
    monkeypatch.setattr(measure, "default_timer", lambda native, engines, s, budget_s: (2.0, [1.0] * len(engines), [0.5] * len(engines)))
    monkeypatch.setenv("MXNET_TENSORRT_ENGINE_RULE", "measured")
    cache = tmp_path / "plans"
    code, out, err = run(capsys, "build", models["net"], *SHAPE, "--cache-dir", cache)
    assert code == 0, err
    assert out.count("engine kept (onnxruntime fp32): 2.00x faster, measured 1.00 vs 2.00 ms") == 2, out
    monkeypatch.setenv("MXNET_TENSORRT_CACHE_DIR", str(cache))
    code, out, err = run(capsys, "partition", models["net"], *SHAPE, "--build", "--json")
    assert code == 0, err
    decisions = json.loads(out)["decisions"]
    assert len(decisions) == 2
    for d in decisions.values():
        assert d["stored"] and d["engine"] == ["onnxruntime", "fp32"] and d["native_ms"] == 2.0
        assert d["engine_ms"] == {"onnxruntime fp32": 1.0}
    code, out, err = run(capsys, "partition", models["net"], *SHAPE, "--build")
    assert "engine rule: measured" in out and out.count("(stored decision)") == 2


def test_build_needs_a_cache(models, capsys, monkeypatch):
    monkeypatch.setenv("MXNET_TENSORRT_CACHE_DIR", "")
    code, out, err = run(capsys, "build", models["net"], *SHAPE)
    assert code == 2 and err.count("\n") == 1 and "plan cache is disabled" in err


def _native_outputs(prefix, x):
    sym, args, aux = mx.model.load_checkpoint(prefix, 3)
    from mx_trt.frontends.hook import disabled

    with disabled():
        exe = sym.simple_bind(mx.cpu(), grad_req="null", data=x.shape)
    exe.copy_params_from(args, aux)
    exe.arg_dict["data"][:] = x
    exe.forward(is_train=False)
    return exe.outputs[0].asnumpy()


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_export_then_load_without_building(models, capsys, tmp_path, monkeypatch, dynamic):
    from mx_trt import load

    out = tmp_path / "exported"
    extra = ["--max-batch", "4"] if dynamic else []
    code, text, err = run(capsys, "export", models["net"], out, *SHAPE, *extra)
    assert code == 0, err
    assert text.startswith(f"exported {models['net']} to {out}: 2 engine(s)")
    manifest = json.loads((out / "mx_trt.json").read_text())
    assert [e["subgraph"] for e in manifest["engines"]] == ["trt_subgraph_0", "trt_subgraph_1"]
    code, _, err = run(capsys, "export", models["net"], out, *SHAPE)
    assert code == 2 and "not empty" in err

    def no_build(*a, **k):
        raise AssertionError("load must not build an engine")

    monkeypatch.setattr(ort_backend.OnnxRuntimeBackend, "build", no_build)
    batch = 3 if dynamic else 1
    exe = load(str(out), mx.cpu(), shapes={"data": (batch, 3, 8, 8)} if dynamic else None)
    assert list(exe.arg_dict) == ["data"] and not exe.aux_dict  # every weight is inside an engine
    x = np.random.RandomState(5).uniform(-1, 1, (batch, 3, 8, 8)).astype("float32")
    exe.arg_dict["data"][:] = x
    exe.forward(is_train=False)
    np.testing.assert_allclose(exe.outputs[0].asnumpy(), _native_outputs(models["net"], x), rtol=1e-4, atol=1e-5)
    assert [f.run_count for f in exe._mx_trt_loaded.engines] == [1, 1]


def test_load_rejects_a_corrupt_export(models, capsys, tmp_path):
    from mx_trt.errors import MxTrtError
    from mx_trt.artifacts import load

    out = tmp_path / "exported"
    assert run(capsys, "export", models["plain"], out, *SHAPE)[0] == 0
    key = json.loads((out / "mx_trt.json").read_text())["engines"][0]["key"]
    entry = out / "engines" / key[:2] / key
    victim = next(p for p in entry.iterdir() if p.name != "meta.json")
    victim.write_bytes(b"garbage")
    with pytest.raises(MxTrtError, match="missing or corrupt"):
        load(str(out), mx.cpu())
    with pytest.raises(MxTrtError, match="not an mx_trt export"):
        load(str(tmp_path), mx.cpu())


def test_partition_and_build_show_each_subgraphs_precision(models, capsys, tmp_path):
    import mx_trt

    sym, args, aux = mx.model.load_checkpoint(models["net"], 3)
    table = tmp_path / "cal.json"
    x = np.random.RandomState(0).uniform(-1, 1, (1, 3, 8, 8)).astype("float32")
    mx_trt.calibrate(sym, (args, aux), [x], method="minmax", out=table, progress=False)
    code, out, err = run(capsys, "partition", models["net"], *SHAPE, "--precision", "int8", "--calibration", table, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert [s["precision"] for s in data["subgraphs"]] == ["int8 (1 op(s) quantized)", "int8 (2 op(s) quantized)"]
    code, out, err = run(capsys, "partition", models["net"], *SHAPE)
    lines = out.splitlines()
    assert code == 0 and lines[3].split()[8] == "precision" and lines[5].split()[9] == "fp32", out  # MACs is 2 words
    code, out, err = run(capsys, "build", models["net"], *SHAPE, "--precision", "int8", "--calibration", table,
                         "--cache-dir", tmp_path / "plans")
    assert code == 0, err
    assert "precision: int8" in out.splitlines()[0]
    assert "  trt_subgraph_0: int8 (1 op(s) quantized)" in out and "  trt_subgraph_1: int8 (2 op(s) quantized)" in out
    np.save(tmp_path / "x.npy", x)  # verify on the calibration data: int8's tolerance
    code, out, err = run(capsys, "verify", models["net"], *SHAPE, "--precision", "int8", "--calibration", table,
                         "--input", tmp_path / "x.npy", "--json")
    data = json.loads(out)
    assert code == 0 and data["precision"] == "int8" and data["rtol"] == 0.1 and data["pass"], out
    assert 0.99 < data["outputs"][0]["cosine"] < 1 - 1e-9  # int8 numbers, within int8's tolerance


@pytest.mark.parametrize("argv,expect", [
    (["--precision", "int8"], "int8 engines need a calibration table"),
    (["--precision", "int8", "--calibration", "/nonexistent/t.json"], "does not exist"),
    (["--fp16", "--precision", "int8", "--calibration", "t.json"], "ask for two precisions"),
], ids=["no-table", "missing-file", "two-precisions"])
def test_int8_without_a_usable_table_exit_2(models, capsys, argv, expect):
    code, out, err = run(capsys, "partition", models["net"], *SHAPE, *argv)
    assert code == 2 and err.count("\n") == 1 and expect in err, err
