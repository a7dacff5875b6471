"""mx_trt.frontends.mxnet_import: the finder that waits for ``import mxnet`` to install the hook.

mxnet is already imported in the test process, so the finder is pointed at a
small package written to ``tmp_path`` (``TARGET`` patched); one check runs a
fresh interpreter on the checkout with the start-up hook opted out, where the
package's own finder is the one that hooks the real mxnet.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from mx_trt.frontends import mxnet_import

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def target(tmp_path, monkeypatch):
    """A package ``fake_mxnet_<id>`` on sys.path whose import appends to ``events``; no finder waits at the start.

    ``sys.meta_path`` is restored afterwards.
    """
    name = f"fake_mxnet_{os.getpid()}_{abs(hash(str(tmp_path)))}"
    pkg = tmp_path / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text("import builtins\nbuiltins._fake_mxnet_events.append('executed')\nVALUE = 7\n")
    events: list = []
    monkeypatch.setattr("builtins._fake_mxnet_events", events, raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(mxnet_import, "TARGET", name)
    saved = list(sys.meta_path)
    mxnet_import.disarm()  # the start-up hook's finder may be waiting for the real mxnet: put back after
    yield name, events
    sys.meta_path[:] = saved
    sys.modules.pop(name, None)


def _ours():
    return [f for f in sys.meta_path if mxnet_import.is_waiting_finder(f)]


def test_the_callable_runs_after_the_package_executed_and_the_finder_leaves(target):
    name, events = target
    seen = []

    def then():
        mod = sys.modules[name]
        seen.append((list(events), mod.VALUE))  # the package finished executing before the call

    mxnet_import.call_when_imported(then)
    assert len(_ours()) == 1 and name not in sys.modules and seen == []
    mod = __import__(name)
    assert seen == [(["executed"], 7)]
    assert _ours() == []
    assert mod.__loader__.__class__.__name__ != "_CallingLoader"  # the real loader is given back
    assert mod.__spec__.loader is mod.__loader__


def test_already_imported_runs_at_once(target):
    name, events = target
    __import__(name)
    calls = []
    mxnet_import.call_when_imported(lambda: calls.append(1))
    assert calls == [1] and _ours() == []


def test_one_finder_waits_at_a_time(target):
    name, _ = target
    calls = []
    mxnet_import.call_when_imported(lambda: calls.append("first"))
    mxnet_import.call_when_imported(lambda: calls.append("second"))  # the waiting one does the same work
    assert len(_ours()) == 1
    __import__(name)
    assert calls == ["first"]


def test_a_start_up_hook_finder_counts_as_waiting(target):
    """A finder of another class with the marker (the start-up hook's) is left to do the work."""
    name, _ = target

    class StartupFinder:
        mx_trt_autoload = True

        def find_spec(self, fullname, path=None, target=None):
            return None

    sys.meta_path.insert(0, StartupFinder())
    calls = []
    mxnet_import.call_when_imported(lambda: calls.append(1))
    assert [type(f) for f in _ours()] == [StartupFinder]
    mxnet_import.disarm()
    assert _ours() == []


def test_a_failing_callable_is_logged_and_the_import_succeeds(target, caplog):
    name, events = target

    def then():
        raise RuntimeError("broken on purpose")

    mxnet_import.call_when_imported(then)
    with caplog.at_level("WARNING", logger=mxnet_import.__name__):
        mod = __import__(name)
    assert mod.VALUE == 7 and events == ["executed"]
    assert "could not hook mxnet" in caplog.text and "broken on purpose" in caplog.text
    assert _ours() == []


def test_other_names_are_not_answered(target):
    finder = mxnet_import.MxnetFinder(lambda: None)
    assert finder.find_spec("json") is None
    assert finder.find_spec(target[0] + "_absent") is None


def test_importing_mx_trt_first_hooks_mxnet_without_the_start_up_hook(tmp_path):
    """The checkout's mx_trt, start-up hook opted out: importing mx_trt leaves mxnet alone until it is imported."""
    code = textwrap.dedent("""
        import json, sys
        import mx_trt
        before = "mxnet" in sys.modules
        waiting = [type(f).__module__ for f in sys.meta_path if getattr(type(f), "mx_trt_autoload", None) is True]
        import mxnet
        print(json.dumps({"before": before, "waiting": waiting, "mx_trt": mx_trt.__file__,
                          "patched": hasattr(mxnet.symbol.Symbol.simple_bind, "__wrapped__"),
                          "left": [type(f).__name__ for f in sys.meta_path
                                   if getattr(type(f), "mx_trt_autoload", None) is True]}))
    """)
    env = {**os.environ, "PYTHONPATH": ROOT, "MX_TRT_AUTOLOAD": "0"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["mx_trt"].startswith(ROOT)
    assert out["before"] is False
    assert out["waiting"] == ["mx_trt.frontends.mxnet_import"]
    assert out["patched"] is True and out["left"] == []
