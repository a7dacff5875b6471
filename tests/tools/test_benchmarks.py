"""The documented benchmark commands keep working, and the light imports stay light.

``python benchmarks/run.py --quick --threads 1`` must run from a checkout: it
sets the thread counts before mxnet is imported, so importing the settings, the
passes or the CLI's argument parser must not import mxnet.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.serving.conftest import needs_server

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _clean_env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MXNET_", "OMP_")) and k != "PYTHONPATH"}
    env["MXNET_TENSORRT_CACHE_DIR"] = ""
    return env


@pytest.mark.parametrize("module", ["mx_trt.settings", "mx_trt.passes.partition", "mx_trt.tools.cli.main", "mx_trt"])
def test_light_imports_do_not_import_mxnet(module):
    code = (f"import sys; sys.path.insert(0, {ROOT!r}); import {module}; "
            f"{'from mx_trt.tools.cli.main import build_parser; build_parser(); ' if module.endswith('main') else ''}"
            "print('mxnet' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_clean_env(), capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "False", f"importing {module} imported mxnet"


def test_runner_quick_mode_with_one_thread(tmp_path):
    out_dir = tmp_path / "bench"
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "run.py"), "--quick", "--threads", "1",
                           "--out", str(out_dir)], cwd=ROOT, env=_clean_env(), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads((out_dir / "results.json").read_text())
    for section in ("partition", "bind", "memory", "fused_node", "end_to_end", "busy", "int8"):
        assert res.get(section), f"section {section} is empty"
    acc = {r["variant"]: r for r in res["int8"]["accuracy"]["rows"]}
    assert acc["fp32 engine"]["top1"] == acc["native MXNet fp32"]["top1"] >= 0.95
    assert acc["int8 engine (entropy)"]["drop_points_vs_fp32_engine"] <= 1.0
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    try:
        from bench_int8 import bf16_backend
    finally:
        sys.path.pop(0)
    backend, _ = bf16_backend()
    bf16 = {"bf16 engine", "MXNet bf16"} if backend else set()
    if backend and backend != "onnxruntime":  # its fp32 baseline: the same backend's fp32 engine
        bf16.add(f"{backend} fp32 engine")
    for row in res["int8"]["speed"]:
        assert set(row["median_ms"]) == {"native fp32", "fp32 engine", "int8 engine", "MXNet INT8"} | bf16
        assert row["cosine_to_native"]["int8 engine"] > 0.98
        if bf16:
            assert row["cosine_to_native"]["bf16 engine"] > 0.99 and row["fp32/bf16"] > 0
            assert "bf16 speed, the same rounds" in proc.stdout
    legs = res["bind"]["legs"]
    assert legs["pass, cold cache, cost rule"]["builds"] >= 1
    # The warm bind builds and times nothing: it loads the engines the measured rule kept (it may keep none).
    warm = legs["pass, warm cache"]
    assert warm["builds"] == 0 and warm["loads"] == warm["engines"] and warm["timings"]["measure"] == 0
    for row in res["busy"]:
        assert row["condition"] in ("quiet", "one core busy") and row["native_equal_threads"]["median_ms"] > 0
        assert row["accelerated_equal_threads"]["median_ms"] > 0 and "equal threads" in row["engines_kept"]
    for row in res["memory"]:
        assert row["accelerated"] == (row["label"] != "native")
        assert row["peak_mb"] >= row["base_mb"] > 0
    assert res["machine"]["threads"] in (1, "1")


def test_serve_section_quick(tmp_path):
    needs_server()  # skips only with USE_SERVE=0
    out_dir = tmp_path / "bench"
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "run.py"), "--quick", "--only", "serve",
                           "--serve-requests", "40", "--out", str(out_dir)], cwd=ROOT, env=_clean_env(),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads((out_dir / "results.json").read_text())["serve"]
    assert [r["concurrency"] for r in res["server"]] == [1, 4, 16]
    for row in res["server"]:
        assert row["failed"] == 0 and row["ok"] == 40 and row["p99_ms"] >= row["p50_ms"] > 0
    assert res["in_process"]["engines"] >= 1 and res["in_process"]["best_throughput"] > 0
    assert res["ratios"]["p50_c1/in_process_batch1"] > 0 and res["ratios"]["throughput_c16/best_in_process"] > 0
    assert "p50 at c=1 / in-process batch 1" in proc.stdout


def test_busy_helper_stops_by_itself(tmp_path, caplog):
    """The busy section's helper ends at its deadline, and when the runner that started it dies."""
    import time

    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    try:
        from busy import BusyCore, deadline_for
    finally:
        sys.path.pop(0)

    helper = BusyCore(seconds=0.5).start()
    assert helper.proc is not None and helper.proc.wait(10) == 0  # the deadline
    with caplog.at_level("WARNING", logger="benchmarks.busy"):
        assert helper.stop("resnet18_v1 batch 1") is False  # it had ended: what was timed was not all busy
    assert "resnet18_v1 batch 1: the busy helper ended before the timings did" in caplog.text
    running = BusyCore(seconds=60).start()
    assert running.stop() is True and running.proc is None
    assert BusyCore().stop() is False
    assert deadline_for(0.0) == 120.0 and deadline_for(300.0) == 4 * 300.0 + 60.0
    code = (f"import os, sys; sys.path.insert(0, {os.path.join(ROOT, 'benchmarks')!r}); from busy import BusyCore; "
            "h = BusyCore(seconds=120).start(); print(h.proc.pid, flush=True); os._exit(0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    pid = int(out.stdout.split()[0])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, 9)
        raise AssertionError("the helper outlived the runner that started it")


def test_models_section_samples_span_a_fixed_forward_time():
    """A fast model's timed sample averages several forwards, a slow model's is one forward, never over the cap."""
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    try:
        import bench_models
    finally:
        sys.path.pop(0)
    per = bench_models.forwards_per_sample
    assert per(3.0) == 10 and per(bench_models.SAMPLE_MS) == 1 and per(2500.0) == 1
    assert per(0.01) == bench_models.MAX_PER_SAMPLE
    assert per(0.0) == 1 and per(float("nan")) == 1
    assert [per(ms) for ms in (1.0, 2.0, 4.0, 8.0)] == sorted([per(ms) for ms in (1.0, 2.0, 4.0, 8.0)], reverse=True)


def test_check_tail_times_every_forward_of_a_checked_executor(monkeypatch):
    """benchmarks/bench_check_tail.py: every forward timed and attributed to the side that served it."""
    monkeypatch.syspath_prepend(os.path.join(ROOT, "benchmarks"))
    import bench_check_tail

    before = {k: os.environ.get(k) for k in ("MXNET_USE_TENSORRT", "MXNET_TENSORRT_RUNTIME_CHECK")}
    r = bench_check_tail.tail("squeezenet1.1", 20, checked=True)
    assert r["forwards"] == 20 and sum(r["check"]["served"].values()) == 20
    assert 0.0 < r["median_ms"] <= r["p99_ms"] <= r["max_ms"]
    assert len(r["slowest"]) == 5 and r["slowest"][0][1] == pytest.approx(r["max_ms"], abs=0.1)
    assert r["decisions"] and "engine kept" in r["decisions"][0]
    assert {k: os.environ.get(k) for k in before} == before  # the environment is restored


def test_check_tail_against_native_times_both_in_alternating_blocks(monkeypatch):
    """benchmarks/bench_check_tail.py --against-native: as many timed forwards of native MXNet as of the
    accelerated executor, whose check served every forward of its own (warm-up included)."""
    monkeypatch.syspath_prepend(os.path.join(ROOT, "benchmarks"))
    import bench_check_tail

    r = bench_check_tail.against_native("squeezenet1.1", 40, 10, busy=False)
    assert r["forwards"] == 40 and r["block"] == 10
    assert r["mean_ms"]["native"] > 0.0 and r["mean_ms"]["accelerated"] > 0.0
    assert r["native/accelerated"] == pytest.approx(r["mean_ms"]["native"] / r["mean_ms"]["accelerated"])
    assert sum(r["check"]["served"].values()) == 200 + 40
    assert r["busy_throughout"] is None  # no helper without busy


def test_the_control_verdict_sorts_ratios_by_the_runs_own_a_a_spread(monkeypatch):
    """benchmarks/report.py: a ratio below 1.00 is a tie only within the A/A control's widest deviation."""
    monkeypatch.syspath_prepend(os.path.join(ROOT, "benchmarks"))
    import report

    v = report.control_verdict([1.2, 1.0, 0.99, 0.975, 0.9], [0.98, 1.01, 1.0])
    assert v["spread"] == pytest.approx(1 / 0.98 - 1)  # 0.98 is 2.04% from 1.0 as a factor
    assert (v["at_least"], v["ties"], v["below"], v["n"]) == (2, 1, 2, 5)  # 0.99 a tie; 0.975 and 0.9 below
    assert report.control_verdict([1.05, 0.999], [])["ties"] == 0  # no control: nothing is a tie
    assert report.control_verdict([0.97], [1.04])["ties"] == 1  # a control above 1.0 widens the band alike
    row = {"ratios": {"native/accelerated": 1.5, "native_equal_threads/accelerated_equal_threads": 0.99,
                      "native/native_control": 0.985, "native_equal_threads/native_control_equal_threads": 1.012}}
    line = report._control_line([row])
    assert line is not None and "as is, default threads 0.985-0.985; as is, equal threads 1.012-1.012" in line
    assert "1 at least 1.00, 1 below 1.00" in line  # 0.99 at equal threads: within that column's 1.012
    # Each ratio against its own column and condition: a busy column's wide controls make no quiet cell a tie.
    quiet = {"condition": "quiet", "ratios": {"native/accelerated": 0.99, "native/native_control": 1.001}}
    busy = {"condition": "one core busy", "ratios": {"native/accelerated": 0.9, "native/native_control": 0.7}}
    assert "1 at least 1.00" not in report._control_line([quiet, busy])
    assert "0 at least 1.00, 1 below 1.00 by no more than" in report._control_line([quiet, busy])
    assert ", 1 below that" in report._control_line([quiet, busy])  # the quiet 0.99, past its 0.1% control
    assert report._control_line([{"ratios": {"native/accelerated": 1.2}}]) is None  # no control measured
    res = {"busy": [{**row, "model": "m", "batch": 1, "condition": "quiet", "threads": 2,
                     "native": {"median_ms": 3.0, "throughput": 333.0, "mean_ms": 3.0},
                     "native_equal_threads": {"median_ms": 2.0, "throughput": 500.0, "mean_ms": 2.0},
                     "accelerated": {"median_ms": 2.0, "throughput": 500.0, "mean_ms": 2.0},
                     "accelerated_equal_threads": {"median_ms": 2.02, "throughput": 495.0, "mean_ms": 2.02},
                     "native_control": {"median_ms": 3.05}, "whole_model": None, "engines": 1, "ops_in_engines": 3,
                     "ops_total": 3, "engines_kept": {"default": ["openvino fp32"]}, "bind_s": {"accelerated": 0.1},
                     "ratios": {**row["ratios"], "accelerated/whole_model": None}}]}
    text = report.render_tables(res)
    assert "A/A 2t" in text.splitlines()[1] and report._control_line(res["busy"]) in text


def test_the_models_section_reports_its_a_a_control(monkeypatch):
    """benchmarks/bench_models.py: native MXNet over itself bound again, per condition and thread count."""
    monkeypatch.syspath_prepend(os.path.join(ROOT, "benchmarks"))
    import bench_models as bm

    med = {"native": 10.0, "measured": 8.0, bm.EQUAL: 6.0, bm.EQUAL_MEASURED: 5.0, bm.CONTROL: 10.2,
           bm.EQUAL_CONTROL: 5.9}
    r = bm._four_ratios(med)
    assert r["default threads"] == pytest.approx(1.25) and r["equal threads"] == pytest.approx(1.2)
    assert r["A/A default threads"] == pytest.approx(10.0 / 10.2) and r["A/A equal threads"] == pytest.approx(6 / 5.9)
    plain = bm._four_ratios({k: v for k, v in med.items() if k not in (bm.CONTROL, bm.EQUAL_CONTROL)})
    assert not any(k.startswith("A/A") for k in plain)  # no control run: no A/A ratio
    row = {"model": "m", "batch": 1, "input": "1x3", "ops": 3, "ops_in_engines": 3, "native_ops": [],
           "median_ms": {**med, "cost": 8.0, "always": 8.0}, "native/cost": 1.25, "engines": {"cost": 1, "always": 1},
           "partitions": {"cost": [[0]], "always": [[0]]}, "threads": 2, "kept": {"default": ["openvino fp32"]},
           "ratios": {"quiet": r}}
    text = bm.render([row])
    assert "A/A control" in text and "quiet, default threads 0.980-0.980; quiet, equal threads 1.017-1.017" in text
    assert "2 native/accelerated ratios with a control: 2 at least 1.00" in text  # 1.25 and 1.2, each against its own column
    assert "A/A control" not in bm.render([{**row, "ratios": {"quiet": plain}}])
