"""The installed package, seen from fresh interpreters.

``make test`` installs mx_trt into .venv (non-editable) before running
pytest. Each check here starts the same interpreter in a subprocess, from an
empty temporary directory and without PYTHONPATH, so the copy in
site-packages is what runs, not the source tree that pytest.ini puts on
``sys.path``. What is checked is the start-up hook: ``mx_trt_autoload.pth``
arms a finder, and importing ``mxnet`` alone is enough to hook
``Symbol.simple_bind``.
"""
from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path
from typing import Dict, List, Optional

import pytest

REPO = Path(__file__).resolve().parents[1]
PTH_NAME = "mx_trt_autoload.pth"


def _site_dirs() -> List[Path]:
    dirs = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    dirs += getattr(site, "getsitepackages", lambda: [])()
    return [Path(d) for d in dict.fromkeys(dirs)]


def _installed_pth() -> Optional[Path]:
    for d in _site_dirs():
        if (d / PTH_NAME).is_file():
            return d / PTH_NAME
    return None


@pytest.fixture(scope="module")
def site_packages() -> Path:
    """The site-packages folder holding the installed mx_trt; fails (not skips) without one."""
    pth = _installed_pth()
    if pth is None:
        pytest.fail(
            f"mx_trt is not installed for {sys.executable} (no {PTH_NAME} in "
            f"{', '.join(map(str, _site_dirs()))}). These tests check the installed package: "
            "run `make test`, which installs it into .venv first.",
            pytrace=False,
        )
    return pth.parent


def _run(code: str, cwd: Path, **env: str) -> Dict[str, object]:
    """Run ``code`` in a fresh interpreter; it prints one JSON object as its last line."""
    full_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MX_TRT_AUTOLOAD")}
    full_env.update(env)
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"subprocess failed ({proc.returncode}):\n{proc.stderr}"
    lines = proc.stdout.strip().splitlines()
    assert lines, f"no output; stderr:\n{proc.stderr}"
    result: Dict[str, object] = json.loads(lines[-1])
    result["stderr"] = proc.stderr
    return result


PROBE = """
    import json, sys
    {before}
    import mxnet
    sb = mxnet.symbol.Symbol.simple_bind
    mx_trt = sys.modules.get("mx_trt")
    print(json.dumps({{
        "patched": hasattr(sb, "__wrapped__"),
        "mx_trt": getattr(mx_trt, "__file__", None),
        "finders": [type(f).__name__ for f in sys.meta_path],
    }}))
"""


def test_pth_file_is_in_site_packages(site_packages: Path) -> None:
    assert (site_packages / PTH_NAME).is_file()
    assert (site_packages / "mx_trt_autoload.py").is_file()
    assert "mx_trt_autoload" in (site_packages / PTH_NAME).read_text()


def test_importing_mxnet_alone_hooks_simple_bind(site_packages: Path, tmp_path: Path) -> None:
    out = _run(PROBE.format(before=""), tmp_path)
    assert out["patched"], "import mxnet did not hook Symbol.simple_bind (no __wrapped__)"
    assert out["mx_trt"] is not None
    # The installed copy ran, not the source tree.
    assert Path(str(out["mx_trt"])).resolve().is_relative_to(site_packages.resolve())
    assert "MxnetFinder" not in out["finders"], "the finder stayed on sys.meta_path"
    assert out["stderr"] == ""


def test_no_cost_without_mxnet(site_packages: Path, tmp_path: Path) -> None:
    out = _run("""
        import json, sys
        print(json.dumps({
            "loaded": sorted(m for m in sys.modules if m.split(".")[0] in ("mxnet", "mx_trt")),
            "finders": [type(f).__name__ for f in sys.meta_path],
        }))
    """, tmp_path)
    assert out["loaded"] == []
    assert "MxnetFinder" in out["finders"], "the start-up hook is not armed"


def test_opt_out_leaves_simple_bind_alone(site_packages: Path, tmp_path: Path) -> None:
    out = _run(PROBE.format(before=""), tmp_path, MX_TRT_AUTOLOAD="0")
    assert not out["patched"]
    assert out["mx_trt"] is None
    assert "MxnetFinder" not in out["finders"]


def test_explicit_import_first_still_works(site_packages: Path, tmp_path: Path) -> None:
    # mx_trt imports mxnet while holding its install lock; the finder must not re-enter it.
    out = _run(PROBE.format(before="import mx_trt"), tmp_path)
    assert out["patched"]
    assert "MxnetFinder" not in out["finders"]


def test_broken_mx_trt_does_not_break_mxnet(site_packages: Path, tmp_path: Path) -> None:
    fake = tmp_path / "fake" / "mx_trt"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise RuntimeError('broken on purpose')\n")
    out = _run(PROBE.format(before=""), tmp_path, PYTHONPATH=str(fake.parent))
    assert not out["patched"]
    assert "MxnetFinder" not in out["finders"]
    assert out["stderr"] == "", "a broken mx_trt must only be logged at DEBUG"


def _pins(path: Path) -> Dict[str, str]:
    """``name -> version`` of the ``==`` pins in a requirements file that apply to this Python."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate():
            continue
        (spec,) = req.specifier
        assert spec.operator == "==", f"{path.name}: {line} is not an exact pin"
        pins[canonicalize_name(req.name)] = spec.version
    return pins


def test_requirement_pins_agree_with_constraints() -> None:
    req = REPO / "requirements"
    locked = _pins(req / "constraints.txt")
    for f in sorted(req.glob("*.txt")):
        if f.name in ("constraints.txt", "build.txt", "typestubs.txt"):
            continue  # the lock itself, and files installed apart from the lock
        for name, version in _pins(f).items():
            assert locked.get(name) == version, f"{f.name}: {name}=={version}, constraints.txt has {locked.get(name)}"


def test_design_example_runs_without_importing_mx_trt(site_packages: Path, tmp_path: Path) -> None:
    # The user's code is the design's example, verbatim in spirit: no mx_trt import.
    code = """
        import json, os
        import numpy as np
        import mxnet as mx

        def merge_dicts(*dict_args):
            result = {}
            for dictionary in dict_args:
                result.update(dictionary)
            return result

        data = mx.sym.var("data")
        sym = mx.sym.FullyConnected(mx.sym.Activation(mx.sym.Convolution(data, num_filter=4, kernel=(3, 3),
                                    name="conv"), act_type="relu", name="relu"), num_hidden=3, name="fc")
        arg_shapes, _, _ = sym.infer_shape(data=(1, 3, 8, 8))
        rng = np.random.RandomState(0)
        arg_params = {n: mx.nd.array(rng.uniform(-1, 1, s)) for n, s in zip(sym.list_arguments(), arg_shapes) if n != "data"}
        aux_params = {}
        x = rng.uniform(-1, 1, (1, 3, 8, 8)).astype("float32")
        outs = {}
        for flag in ("0", "1"):
            os.environ["MXNET_USE_TENSORRT"] = flag
            executor = sym.simple_bind(ctx=mx.cpu(), data=(1, 3, 8, 8),
                                       shared_buffer=merge_dicts(arg_params, aux_params), grad_req="null")
            if flag == "0":
                executor.copy_params_from(arg_params, aux_params)
            executor.arg_dict["data"][:] = x
            executor.forward(is_train=False)
            outs[flag] = (executor.outputs[0].asnumpy(), hasattr(executor, "_mx_trt"), sorted(executor.arg_dict))
        print(json.dumps({"diff": float(np.abs(outs["0"][0] - outs["1"][0]).max()),
                          "accelerated": [outs["0"][1], outs["1"][1]], "args": outs["1"][2]}))
    """
    out = _run(code, tmp_path, MXNET_TENSORRT_CACHE_DIR="")
    assert out["accelerated"] == [False, True]
    assert out["args"] == ["data"]
    assert out["diff"] <= 1e-5  # fp32, a three-layer net
