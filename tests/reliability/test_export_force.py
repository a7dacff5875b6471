"""``--force`` replaces only what mx_trt wrote: a folder of the user's is refused, named, and left as it was.

Before, ``mxtrt export --triton OUTDIR --force`` deleted the whole tree of an
``OUTDIR/NAME`` (or ``OUTDIR/NAME_onnx``) folder of the user's, and a plain
``--force`` export replaced any folder holding a file merely named
``mx_trt.json``. Checkpoint: ``data (1, 4) -> FullyConnected(3)``.
"""
from __future__ import annotations

import json
import os

import mxnet as mx
import pytest

import mx_trt
from mx_trt.errors import ExportError
from mx_trt.serving.repository import MODEL_MARK
from mx_trt.tools.cli.main import main

SHAPE = ["--shape", "data=1,4"]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    prefix = str(tmp_path_factory.mktemp("ckpt") / "tiny")
    sym = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=3, name="fc")
    args = {"fc_weight": mx.nd.ones((3, 4)), "fc_bias": mx.nd.zeros((3,))}
    mx.model.save_checkpoint(prefix, 0, sym, args, {})
    return prefix


def _user_folder(path):
    path.mkdir(parents=True)
    (path / "data.csv").write_text("a,b\n1,2\n")
    (path / "notes").mkdir()
    (path / "notes" / "notes.txt").write_text("mine")
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in path.rglob("*") if p.is_file()}


def _tree(path):
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in path.rglob("*") if p.is_file()}


def _export(capsys, *args):
    code = main(["export", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out + out.err


@pytest.mark.parametrize("folder", ["tiny", "tiny_onnx", "tiny_trt"])
def test_triton_force_refuses_a_users_folder_named_like_a_model(ckpt, tmp_path, capsys, folder):
    repo = tmp_path / "repo"
    before = _user_folder(repo / folder)
    code, text = _export(capsys, ckpt, repo, *SHAPE, "--triton", "--force")
    assert code != 0
    assert str(repo / folder) in text and "not written by mx_trt" in text
    assert _tree(repo / folder) == before
    assert sorted(os.listdir(repo)) == [folder]  # nothing written beside it either


def test_triton_force_refuses_a_forged_or_foreign_mark_and_extra_files(ckpt, tmp_path, capsys):
    repo = tmp_path / "repo"
    before = _user_folder(repo / "tiny")
    for forged in ("{}", '{"writer": "mx_trt"}', "[" * 100000 + "]" * 100000,
                   json.dumps({"writer": "mx_trt", "kind": "triton-model", "model": "other", "files": []})):
        (repo / "tiny" / MODEL_MARK).write_text(forged)
        code, text = _export(capsys, ckpt, repo, *SHAPE, "--triton", "--force")
        assert code != 0 and str(repo / "tiny") in text, forged[:40]
        assert {k: v for k, v in _tree(repo / "tiny").items() if k != MODEL_MARK} == before
    # A real mark that does not list the user's files: still refused.
    (repo / "tiny" / MODEL_MARK).write_text(json.dumps(
        {"writer": "mx_trt", "kind": "triton-model", "model": "tiny", "files": ["data.csv"]}))
    code, text = _export(capsys, ckpt, repo, *SHAPE, "--triton", "--force")
    assert code != 0 and "holds files mx_trt did not write (notes/notes.txt)" in text


def test_triton_force_replaces_what_mx_trt_wrote_and_keeps_a_file_added_since(ckpt, tmp_path, capsys):
    repo = tmp_path / "repo"
    assert _export(capsys, ckpt, repo, *SHAPE, "--triton")[0] == 0
    mark = json.loads((repo / "tiny" / MODEL_MARK).read_text())
    assert "config.pbtxt" in mark["files"] and "1/model.py" in mark["files"]
    assert _export(capsys, ckpt, repo, *SHAPE, "--triton", "--force")[0] == 0  # its own output: replaced
    (repo / "tiny" / "1" / "notes.txt").write_text("mine")
    code, text = _export(capsys, ckpt, repo, *SHAPE, "--triton", "--force")
    assert code != 0 and str(repo / "tiny") in text and "1/notes.txt" in text
    assert (repo / "tiny" / "1" / "notes.txt").read_text() == "mine"


def test_plain_force_refuses_a_folder_with_a_file_merely_named_like_the_manifest(ckpt, tmp_path, capsys):
    out = tmp_path / "out"
    before = _user_folder(out)
    (out / "mx_trt.json").write_text('{"format": "whatever"}')
    before = _tree(out)
    code, text = _export(capsys, ckpt, out, *SHAPE, "--force")
    assert code != 0 and str(out) in text and "not an mx_trt export" in text
    assert _tree(out) == before
    sym, args, aux = mx.model.load_checkpoint(ckpt, 0)
    with pytest.raises(ExportError, match="not overwriting it"):
        mx_trt.export_model(sym, mx.cpu(), {**args, **aux}, {"data": (1, 4)}, str(out), overwrite=True)
    assert _tree(out) == before


def test_plain_force_replaces_an_export_but_not_one_holding_the_users_files(ckpt, tmp_path, capsys):
    out = tmp_path / "out"
    assert _export(capsys, ckpt, out, *SHAPE)[0] == 0
    assert _export(capsys, ckpt, out, *SHAPE, "--force")[0] == 0
    (out / "data.csv").write_text("mine")
    code, text = _export(capsys, ckpt, out, *SHAPE, "--force")
    assert code != 0 and "holds files the mx_trt export did not write (data.csv)" in text
    assert (out / "data.csv").read_text() == "mine" and (out / "mx_trt.json").is_file()
