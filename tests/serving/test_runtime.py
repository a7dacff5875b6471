"""The bundled server's files, the interpreter check, and the rule that binding never imports Triton."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import sysconfig

import pytest

from mx_trt.errors import ServeError
from mx_trt.serving import runtime
from tests.serving.conftest import SERVE_OFF, SERVE_OFF_REASON, needs_server

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_this_interpreter_can_serve_where_the_extra_is_installed():
    """Fails, not skips, unless the serve extra is switched off (CI has it, and an interpreter that serves)."""
    if SERVE_OFF:
        pytest.skip(SERVE_OFF_REASON)
    assert importlib.util.find_spec("pytriton") is not None, "the serve extra is not installed; USE_SERVE=1 installs it"
    assert runtime.serve_problem() is None
    lib = runtime.find_libpython()
    assert runtime.library_version(lib) == sys.version
    dist = runtime.find_dist()
    assert os.path.basename(os.path.dirname(dist.stub)) == f"{sys.version_info[0]}.{sys.version_info[1]}"


def test_a_library_of_another_build_is_refused(tmp_path, monkeypatch):
    other = tmp_path / "libpython3.11.so.1.0"
    other.write_bytes(b"not this interpreter's library")
    real = sysconfig.get_config_var

    def config(name):
        return {"LIBDIR": str(tmp_path), "INSTSONAME": "libpython3.11.so.1.0"}.get(name, real(name))

    monkeypatch.setattr(runtime.sysconfig, "get_config_var", config)
    monkeypatch.setattr(runtime, "library_version", lambda path: "3.11.99 (main, Jan 1 2030, 00:00:00) [GCC 99]")
    with pytest.raises(ServeError, match="another Python build.*make venv PYTHON=/usr/bin/python3.11"):
        runtime.find_libpython()
    other.unlink()
    with pytest.raises(ServeError, match="no shared library"):
        runtime.find_libpython()
    assert "no shared library" in (runtime.serve_problem() or "")


def test_library_version_of_a_file_that_is_no_library(tmp_path):
    junk = tmp_path / "libjunk.so"
    junk.write_bytes(b"junk")
    assert runtime.library_version(str(junk)) is None


def test_missing_extra_is_one_clear_error(monkeypatch):
    monkeypatch.setattr(runtime.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ServeError, match=r"pip install 'mx_trt\[serve\]'"):
        runtime.find_dist()


def test_prepare_lays_out_the_backend_and_the_environment(tmp_path):
    needs_server()
    rt = runtime.prepare(str(tmp_path), {"PATH": "/bin"})
    stub = os.path.join(rt.backend_dir, "python", "triton_python_backend_stub")
    assert os.access(stub, os.X_OK)
    first = rt.env["LD_LIBRARY_PATH"].split(os.pathsep)[0]
    assert os.path.realpath(os.path.join(first, os.listdir(first)[0])) == runtime.find_libpython()
    assert rt.env["PATH"].split(os.pathsep)[0] == os.path.dirname(sys.executable)
    cmd = rt.command("/repo", 1, 2, 3)
    assert "--model-repository=/repo" in cmd and "--http-port=1" in cmd and "--metrics-port=3" in cmd


def test_binding_never_imports_triton():
    code = ("import os, sys; os.environ['MXNET_USE_TENSORRT'] = '1'; import mxnet as mx, mx_trt; "
            "x = mx.sym.var('data'); s = mx.sym.FullyConnected(mx.sym.relu(x), num_hidden=3, name='fc'); "
            "p = {'fc_weight': mx.nd.ones((3, 4)), 'fc_bias': mx.nd.zeros(3)}; "
            "e = s.simple_bind(mx.cpu(), data=(2, 4), shared_buffer=p, grad_req='null'); e.forward(); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pytriton', 'tritonclient', "
            "'triton_python_backend_utils') or m.startswith('mx_trt.serving')))")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(MXNET_TENSORRT_CACHE_DIR="", MXNET_TENSORRT_ENGINE_RULE="always")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"
