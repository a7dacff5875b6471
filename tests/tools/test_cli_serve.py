"""``mxtrt serve``'s options: every bad value is one line and exit 2; a machine that cannot serve is one line, exit 1.

The server itself runs in ``tests/serving/`` (``test_signals.py`` runs ``mxtrt serve`` in a subprocess)."""
from __future__ import annotations

import pytest

from mx_trt.errors import ServeError
from mx_trt.serving import runtime
from mx_trt.tools.cli.main import main
from tests.serving.conftest import small_cnn


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    p = str(tmp_path_factory.mktemp("ckpt") / "tiny")
    small_cnn(p)
    return p


def _run(capsys, *argv):
    code = main([str(a) for a in argv])
    got = capsys.readouterr()
    return code, got.out, got.err


@pytest.mark.parametrize("extra,words", [
    (["--http-port", "9000", "--grpc-port", "9000"], "must differ"),
    (["--http-port", "70000"], "0 to 65535"),
    (["--max-batch", "0"], "from 1 to"),
    (["--instances", "65"], "from 1 to 64"),
    (["--max-queue-delay-us", "-1"], "from 0 to"),
    (["--model-name", "a/b"], "model name"),
    (["--dtype", "data=str"], "Triton carries"),
    (["--dtype", "label=int32"], "unknown input"),
    (["--shape", "data=1,3,16"], "do not fit the model"),
])
def test_bad_options(prefix, capsys, extra, words):
    argv = ["serve", prefix, "--epoch", "0"] + (["--shape", "data=1,3,16,16"] if "--shape" not in extra else []) + extra
    code, _, err = _run(capsys, *argv)
    assert code == 2 and words in err and len(err.strip().splitlines()) == 1, err


def test_an_interpreter_that_cannot_serve_is_one_line(prefix, capsys, monkeypatch):
    def refuse():
        raise ServeError("Triton's Python backend embeds libpython3.11.so.1.0, but this interpreter cannot provide "
                         "its own: make the virtual environment with PYTHON=/usr/bin/python3.11")

    monkeypatch.setattr(runtime, "find_libpython", refuse)
    code, _, err = _run(capsys, "serve", prefix, "--epoch", "0", "--shape", "data=1,3,16,16", "--http-port", "0",
                        "--grpc-port", "0", "--metrics-port", "0")
    assert code == 1 and "PYTHON=/usr/bin/python3.11" in err and len(err.strip().splitlines()) == 1, err


def test_help_lists_serve(capsys):
    code, out, _ = _run(capsys, "--help")
    assert code == 0 and "mxtrt serve PREFIX" in out
