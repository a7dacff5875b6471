"""mx_trt.settings: the environment parsed once per bind, explicit options over it, the scoped setters."""
from __future__ import annotations

import ast
import os
import threading
from typing import List, Tuple

import pytest

from mx_trt import settings
from mx_trt.errors import CalibrationError, MxTrtError
from mx_trt.settings import OPTIONS, Settings


def test_defaults_with_a_clean_environment(monkeypatch):
    for k in list(os.environ):
        if k.startswith("MXNET_TENSORRT_"):
            monkeypatch.delenv(k)
    s = Settings.from_env()
    assert (s.fp16, s.int8, s.engine_rule, s.min_subgraph_size, s.backend, s.max_batch_size) == (
        False, False, "measured", 1, None, None)
    assert s.precision == "fp32" and s.calibration_iters == 0


@pytest.mark.parametrize("var,value,words", [
    ("MXNET_TENSORRT_MIN_SUBGRAPH_SIZE", "0", "MXNET_TENSORRT_MIN_SUBGRAPH_SIZE='0'"),
    ("MXNET_TENSORRT_MAX_BATCH_SIZE", "big", "expected an integer"),
    ("MXNET_TENSORRT_ORT_THREADS", "lots", "MXNET_TENSORRT_ORT_THREADS"),
    ("MXNET_TENSORRT_STRICT", "maybe", "expected 1 or 0"),
    ("MXNET_TENSORRT_PRECISION", "int4", "fp32, fp16, bf16, int8"),
    ("MXNET_TENSORRT_RTX_SPECIALIZATION", "always", "lazy, eager, none"),
    ("MXNET_TENSORRT_PROFILES", "[{", "not valid JSON"),
    ("MXNET_TENSORRT_CALIBRATION_ITERS", "-1", "must be between 0 and"),
])
def test_a_bad_value_names_the_variable_and_what_is_allowed(monkeypatch, var, value, words):
    monkeypatch.setenv(var, value)
    with pytest.raises(MxTrtError, match=words.replace("(", r"\(").replace("[", r"\[")):
        Settings.from_env()


def test_explicit_options_win_and_unknown_ones_are_named(monkeypatch):
    monkeypatch.setenv("MXNET_TENSORRT_ENGINE_RULE", "always")
    s = Settings.from_env().with_options({"engine_rule": "cost", "max_batch_size": "8", "exclude_ops": "Pooling,FullyConnected"})
    assert s.engine_rule == "cost" and s.max_batch_size == 8 and s.exclude_ops == {"Pooling", "FullyConnected"}
    with pytest.raises(MxTrtError, match="unknown option 'nope'"):
        s.with_options({"nope": 1})
    with pytest.raises(MxTrtError, match="max_batch_size=0"):
        s.with_options({"max_batch_size": 0})
    assert set(OPTIONS) >= {"precision", "calibration", "calibration_iters", "fp16", "backend", "strict"}


def test_int8_needs_a_table_or_calibration_iters():
    with pytest.raises(CalibrationError):
        Settings().with_options({"precision": "int8"})
    s = Settings().with_options({"precision": "int8", "calibration_iters": 5})
    assert s.int8 and s.calibration is None and s.calibration_iters == 5


def test_scoped_default_is_per_thread_with_the_main_threads_value_as_default():
    v: settings.ScopedDefault[int] = settings.ScopedDefault("test_value")
    assert v.get() is None
    v.set(1)  # main thread: the process default too
    seen = {}

    def worker(name, value):
        if value is not None:
            v.set(value)
        seen[name] = v.get()

    threads = [threading.Thread(target=worker, args=("sets", 2)), threading.Thread(target=worker, args=("reads", None))]
    for t in threads:
        t.start()
        t.join()
    assert seen == {"sets": 2, "reads": 1} and v.get() == 1
    v.set(None)
    assert v.get() is None


def test_subgraph_backend_tensorrt_is_masked_from_mxnet_and_restored(monkeypatch):
    monkeypatch.setenv("MXNET_SUBGRAPH_BACKEND", "TensorRT")
    assert settings.subgraph_backend_is_tensorrt()
    with settings.masked_subgraph_backend():
        assert os.environ["MXNET_SUBGRAPH_BACKEND"] == "NONE"
        assert settings.subgraph_backend_is_tensorrt()  # the pass still sees what the user set
        with settings.masked_subgraph_backend():
            assert os.environ["MXNET_SUBGRAPH_BACKEND"] == "NONE"
        assert os.environ["MXNET_SUBGRAPH_BACKEND"] == "NONE"
    assert os.environ["MXNET_SUBGRAPH_BACKEND"] == "TensorRT"
    monkeypatch.setenv("MXNET_SUBGRAPH_BACKEND", "MKLDNN")
    with settings.masked_subgraph_backend():
        assert os.environ["MXNET_SUBGRAPH_BACKEND"] == "MKLDNN"  # other backends are MXNet's


def test_scoped_default_cleared_in_a_thread_follows_the_main_threads_value_again():
    v: settings.ScopedDefault[int] = settings.ScopedDefault("test_clear")
    v.set(1)
    seen = []

    def worker():
        v.set(2)
        seen.append(v.get())
        v.set(None)  # this thread's own value goes; the process default decides again
        seen.append(v.get())

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert seen == [2, 1] and v.get() == 1
    v.set(None)


def test_a_value_set_in_a_thread_never_reaches_a_thread_started_later_or_the_main_thread():
    v: settings.ScopedDefault[int] = settings.ScopedDefault("test_leak")
    later = []
    first = threading.Thread(target=v.set, args=(5,))
    first.start()
    first.join()
    second = threading.Thread(target=lambda: later.append(v.get()))
    second.start()
    second.join()
    assert later == [None] and v.get() is None


def test_from_env_parses_every_variable_once(monkeypatch, tmp_path):
    env = {"MXNET_TENSORRT_CACHE_DIR": str(tmp_path / "c"), "MXNET_TENSORRT_CACHE_MAX_MB": "12",
           "MXNET_TENSORRT_WORKSPACE_MB": "64", "MXNET_TENSORRT_RTX_SPECIALIZATION": "Eager",
           "MXNET_TENSORRT_ORT_THREADS": "3", "OMP_NUM_THREADS": "2", "MXNET_TENSORRT_DATA_NAMES": "mask, ids",
           "MXNET_TENSORRT_STRICT": "1", "MXNET_TENSORRT_BACKEND": "OnnxRuntime"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    s = Settings.from_env()
    assert (s.cache_dir, s.cache_max_mb, s.cache_errors) == (str(tmp_path / "c"), 12, ())
    assert (s.workspace_mb, s.rtx_specialization, s.ort_threads, s.omp_threads) == (64, "eager", 3, "2")
    assert s.data_names == {"mask", "ids"} and s.strict and s.backend == "onnxruntime"
    assert s.engine_options() == {"ort_threads": 3, "workspace_mb": 64, "rtx_specialization": "eager"}
    assert s.thread_counts() == {"OMP_NUM_THREADS": "2", "MXNET_TENSORRT_ORT_THREADS": "3"}
    for k in env:  # the value holds what was read: later changes of the environment do not reach it
        monkeypatch.delenv(k)
    assert s.cache_dir == str(tmp_path / "c") and s.engine_options()["workspace_mb"] == 64
    assert Settings.from_env().engine_options() == {}


def test_cache_folder_defaults_and_bad_cache_values_disable_only_the_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("MXNET_TENSORRT_CACHE_DIR")
    assert Settings.from_env().cache_dir == str(tmp_path / "xdg" / "mx_trt")
    monkeypatch.setenv("MXNET_TENSORRT_CACHE_DIR", "  ")
    assert Settings.from_env().cache_dir == ""  # blank: no plan cache
    monkeypatch.setenv("MXNET_TENSORRT_CACHE_DIR", "off")
    monkeypatch.setenv("MXNET_TENSORRT_CACHE_MAX_MB", "lots")
    s = Settings.from_env()  # no error: a bad cache value costs the cache, not the bind
    assert s.cache_dir == "" and len(s.cache_errors) == 2
    assert s.cache_errors[0].startswith("MXNET_TENSORRT_CACHE_DIR='off'")
    assert s.cache_errors[1].startswith("MXNET_TENSORRT_CACHE_MAX_MB='lots'")
    mine = s.with_options({"cache_dir": str(tmp_path / "mine")})  # the folder named explicitly wins
    assert mine.cache_dir == str(tmp_path / "mine") and [e[:27] for e in mine.cache_errors] == [
        "MXNET_TENSORRT_CACHE_MAX_MB"]


def test_child_environment_is_a_copy_with_overrides(monkeypatch):
    monkeypatch.setenv("MX_TRT_TEST_CHILD", "parent")
    env = settings.child_environment({"MX_TRT_TEST_CHILD": None, "OMP_NUM_THREADS": "1"})
    assert "MX_TRT_TEST_CHILD" not in env and env["OMP_NUM_THREADS"] == "1"
    assert os.environ["MX_TRT_TEST_CHILD"] == "parent"  # this process's environment is untouched
    assert settings.child_environment({"A": "b"}, base={"PATH": "/x"}) == {"PATH": "/x", "A": "b"}


def test_quiet_mxnet_subgraph_log_leaves_a_users_value_and_restores(monkeypatch):
    monkeypatch.delenv("MXNET_SUBGRAPH_VERBOSE", raising=False)
    with settings.quiet_mxnet_subgraph_log():
        assert os.environ["MXNET_SUBGRAPH_VERBOSE"] == "0"
        with settings.quiet_mxnet_subgraph_log():
            assert os.environ["MXNET_SUBGRAPH_VERBOSE"] == "0"
        assert os.environ["MXNET_SUBGRAPH_VERBOSE"] == "0"
    assert "MXNET_SUBGRAPH_VERBOSE" not in os.environ
    monkeypatch.setenv("MXNET_SUBGRAPH_VERBOSE", "1")
    with settings.quiet_mxnet_subgraph_log():
        assert os.environ["MXNET_SUBGRAPH_VERBOSE"] == "1"
    assert os.environ["MXNET_SUBGRAPH_VERBOSE"] == "1"


# -- only mx_trt/settings.py touches the environment ------------------------------------------------

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: What reads or writes a process's environment, as attributes (``os.environ``) or imported names.
ENV_NAMES = {"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"}
#: The start-up hook runs at interpreter start, before mx_trt can be imported: it may read its own switch only.
AUTOLOAD = "mx_trt_autoload.py"
AUTOLOAD_READS = {"ENV_SWITCH"}


def _environment_uses(source: str) -> List[Tuple[int, str]]:
    """(line, what) for every use of the environment in ``source``: ``os.environ`` (any alias of the
    module), ``os.getenv``/``putenv``/``unsetenv``, and those names imported from ``os``/``posix``/``nt``."""
    out: List[Tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in ENV_NAMES:
            out.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.ImportFrom) and node.module in ("os", "posix", "nt"):
            out += [(node.lineno, f"from {node.module} import {a.name}") for a in node.names if a.name in ENV_NAMES]
    return out


def _sources() -> List[str]:
    """Every Python file of the package, of passes/ and the start-up hook (relative paths)."""
    files = [AUTOLOAD]
    for top in ("mx_trt", "passes"):
        for root, dirs, names in os.walk(os.path.join(ROOT, top)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            files += sorted(os.path.relpath(os.path.join(root, n), ROOT) for n in names if n.endswith(".py"))
    return files


def test_only_settings_touches_the_environment():
    problems = []
    sources = _sources()
    assert os.path.join("mx_trt", "settings.py") in sources and len(sources) > 100
    for rel in sources:
        if rel == os.path.join("mx_trt", "settings.py"):
            continue
        with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
            source = f.read()
        for line, what in _environment_uses(source):
            problems.append(f"{rel}:{line}: {what}")
    allowed = []
    for p in problems:  # the start-up hook's one read of its own switch: os.environ.get(ENV_SWITCH, ...)
        rel, line, _ = p.split(":", 2)
        if rel == AUTOLOAD:
            with open(os.path.join(ROOT, AUTOLOAD), encoding="utf-8") as f:
                text = f.read().splitlines()[int(line) - 1]
            if any(f"os.environ.get({n}" in text for n in AUTOLOAD_READS):
                allowed.append(p)
    rest = [p for p in problems if p not in allowed]
    assert not rest, ("only mx_trt/settings.py may read or write the environment; pass the value down in the "
                      "bind's Settings, or add a function to settings.py:\n" + "\n".join(rest))
    assert len(allowed) == 1, allowed  # mx_trt_autoload.enabled(), nothing more


@pytest.mark.parametrize("source, found", [
    ("import os\nx = os.environ['A']", 1),
    ("import os as o\no.environ.pop('A')", 1),
    ("from os import environ, getenv\n", 2),
    ("import os\nos.putenv('A', '1'); os.getenv('B')", 2),
    ("import os\nos.path.join('a', 'b')", 0),
])
def test_the_environment_check_finds_every_form(source, found):
    assert len(_environment_uses(source)) == found


def test_asyncio_to_thread_starts_with_the_callers_value():
    import asyncio

    v: settings.ScopedDefault[int] = settings.ScopedDefault("test_async")
    v.set(1)
    seen = []

    def worker():
        v.set(7)
        seen.append(asyncio.run(asyncio.to_thread(v.get)))

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    seen.append(asyncio.run(asyncio.to_thread(v.get)))
    assert seen == [7, 1]
    v.set(None)


@pytest.mark.parametrize("value,precision", [("bf16", "bf16"), ("BFloat16", "bf16"), ("fp16", "fp16"),
                                             ("float32", "fp32"), ("int8", "int8")])
def test_the_precision_option_takes_each_precision_and_sets_one_flag(value, precision):
    s = Settings(calibration="t.json").with_options({"precision": value})
    assert s.precision == precision
    assert (s.fp16, s.bf16, s.int8) == (precision == "fp16", precision == "bf16", precision == "int8")
    with pytest.raises(MxTrtError, match="expected 'fp32', 'fp16', 'bf16' or 'int8'"):
        Settings().with_options({"precision": "tf32"})
