"""The plan cache cannot hurt: faults of the cache folder never cost an engine, never reach outside it.

1. An unusable cache (a file, a folder under a file, an unwritable HOME, a
   read-only folder) costs one warning naming the folder and the reason; the
   bind still accelerates. ``mxtrt build`` fails when it can store nothing.
2. Links planted in the tree are never followed (nothing outside is read or
   written); metadata naming paths is corrupt; malformed entries are rebuilt;
   permissions follow the umask; an export folder is only read by ``mx_trt.load``,
   which raises only :class:`~mx_trt.errors.ExportError` for a damaged export.
3. A process killed by SIGKILL mid-write leaves its files under the cache's
   ``tmp/`` (or named by its pid outside a cache); the next use sweeps them.
4. Bad environment values are one clear line.

Crash-prone cases run in subprocesses with time limits.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

import mxnet as mx
import numpy as np
import pytest

import mx_trt
from mx_trt.frontends.hook import disabled
from mx_trt.builder import engines
from mx_trt.builder.backends import onnxruntime as ort_backend
from mx_trt.cache import EngineCache, make_key
from mx_trt.errors import CacheError, ExportError
from mx_trt.settings import Settings
from mx_trt.tools.cli.main import main as cli_main
from tests.harness.mxcheck import random_params

REPO = Path(__file__).resolve().parents[2]
SHAPES = {"data": (2, 3, 8, 8)}
KEY = make_key({"model": "victim test"})
TIMEOUT = 180


def cnn():
    x = mx.sym.var("data")
    c = mx.sym.Convolution(x, num_filter=4, kernel=(3, 3), pad=(1, 1), name="conv")
    return mx.sym.FullyConnected(mx.sym.Activation(c, act_type="relu", name="relu"), num_hidden=3, name="fc")


def _model():
    sym = cnn()
    args, aux = random_params(sym, SHAPES)
    x = np.random.RandomState(0).uniform(-1, 1, SHAPES["data"]).astype("float32")
    return sym, args, aux, x


def _native(sym, args, aux, x):
    with disabled():
        exe = sym.simple_bind(mx.cpu(), grad_req="null", **SHAPES)
    exe.copy_params_from(args, aux)
    exe.arg_dict["data"][:] = x
    exe.forward(is_train=False)
    return exe.outputs[0].asnumpy()


def _bind(sym, args, aux, x):
    """An accelerated bind and its output, as a new process would do it (no engine kept in memory)."""
    engines.clear_pool()
    exe = sym.simple_bind(mx.cpu(), grad_req="null", shared_buffer={**args, **aux}, **SHAPES)
    exe.arg_dict["data"][:] = x
    exe.forward(is_train=False)
    return mx_trt.bind_info(exe), exe.outputs[0].asnumpy()


def _warnings(caplog) -> List[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("mx_trt")]


def _tree(root: Path) -> Dict[str, Tuple]:
    """Everything under ``root``: kind, size, mtime and content digest (links not followed)."""
    out: Dict[str, Tuple] = {}
    if not os.path.lexists(root):
        return out
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            digest = ""
            if stat.S_ISREG(st.st_mode):
                digest = hashlib.sha256(Path(p).read_bytes()).hexdigest()
            out[os.path.relpath(p, root)] = (stat.S_IFMT(st.st_mode), st.st_size, st.st_mtime_ns, digest)
    return out


def _run(body: str, *args: str, env: Dict[str, str]) -> subprocess.CompletedProcess:
    full = dict(os.environ, PYTHONPATH=str(REPO), MXNET_USE_TENSORRT="1", **env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(body), *args], env=full, capture_output=True,
                          text=True, timeout=TIMEOUT)


@contextlib.contextmanager
def _read_only(path: Path) -> Iterator[None]:
    """Make a folder tree read-only for this process (chmod, or ``chattr +i`` as root); skip if impossible."""
    dirs = [path, *[p for p in path.rglob("*") if p.is_dir() and not p.is_symlink()]]
    if os.geteuid() != 0:
        for d in dirs:
            d.chmod(0o555)
        try:
            yield
        finally:
            for d in dirs:
                d.chmod(0o755)
        return
    if subprocess.run(["chattr", "-R", "+i", str(path)], capture_output=True).returncode != 0:
        pytest.skip("cannot make a folder read-only for root here (chattr +i refused)")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-R", "-i", str(path)], capture_output=True)


@pytest.fixture
def accel(monkeypatch):
    monkeypatch.setenv("MXNET_USE_TENSORRT", "1")
    return _model()


def _entry_dirs(cache_dir: Path) -> List[Path]:
    return [p.parent for p in cache_dir.glob("??/*/meta.json")]


# --------------------------------------------------------------------------- 1. an optimization, never a condition


def _file(tmp_path: Path) -> Tuple[Path, Dict[str, str]]:
    f = tmp_path / "a_file"
    f.write_text("not a folder")
    return f, {"MXNET_TENSORRT_CACHE_DIR": str(f)}


def _under_file(tmp_path: Path) -> Tuple[Path, Dict[str, str]]:
    f = tmp_path / "a_file"
    f.write_text("not a folder")
    return f / "cache", {"MXNET_TENSORRT_CACHE_DIR": str(f / "cache")}


def _home_is_a_file(tmp_path: Path) -> Tuple[Path, Dict[str, str]]:
    home = tmp_path / "home"
    home.write_text("HOME is a file")
    return home / ".cache" / "mx_trt", {"HOME": str(home)}


@pytest.mark.parametrize("where", [_file, _under_file, _home_is_a_file])
def test_unusable_cache_builds_in_memory_with_one_warning(monkeypatch, tmp_path, caplog, accel, where):
    sym, args, aux, x = accel
    path, env = where(tmp_path)
    monkeypatch.delenv("MXNET_TENSORRT_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with caplog.at_level(logging.WARNING):
        info, out = _bind(sym, args, aux, x)
    assert info.engines and not info.native_failures and info.builds == len(info.engines)
    (w,) = _warnings(caplog)
    assert str(path) in w and "Not a directory" in w and "built in memory" in w
    np.testing.assert_allclose(out, _native(sym, args, aux, x), rtol=1e-4, atol=1e-5)


def test_read_only_cache_serves_its_engines_and_writes_nothing(monkeypatch, tmp_path, caplog, accel):
    sym, args, aux, x = accel
    cache_dir = tmp_path / "ro"
    monkeypatch.setenv("MXNET_TENSORRT_CACHE_DIR", str(cache_dir))
    _, good = _bind(sym, args, aux, x)
    assert len(_entry_dirs(cache_dir)) == 1
    with _read_only(cache_dir):
        before = _tree(cache_dir)
        with caplog.at_level(logging.WARNING):
            info, out = _bind(sym, args, aux, x)
        assert (info.builds, info.loads) == (0, 1) and not info.native_failures
        (w,) = _warnings(caplog)
        assert str(cache_dir) in w and "cannot be written" in w
        # A model the cache does not hold is built in memory.
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            info2, _ = _bind(sym, dict(args, fc_bias=args["fc_bias"] + 1), aux, x)
        assert info2.builds == 1 and info2.engines and len(_warnings(caplog)) == 1
        assert _tree(cache_dir) == before
    np.testing.assert_array_equal(out, good)


def test_read_only_empty_cache_folder(monkeypatch, tmp_path, caplog, accel):
    sym, args, aux, x = accel
    cache_dir = tmp_path / "empty"
    cache_dir.mkdir()
    monkeypatch.setenv("MXNET_TENSORRT_CACHE_DIR", str(cache_dir))
    with _read_only(cache_dir):
        with caplog.at_level(logging.WARNING):
            info, _ = _bind(sym, args, aux, x)
        assert info.engines and info.builds == len(info.engines)
        (w,) = _warnings(caplog)
        assert str(cache_dir) in w
    assert not any(cache_dir.iterdir())


@pytest.fixture
def checkpoint(tmp_path):
    sym, args, aux, _ = _model()
    prefix = str(tmp_path / "ckpt" / "net")
    os.makedirs(os.path.dirname(prefix))
    mx.model.save_checkpoint(prefix, 0, sym, args, aux)
    return prefix


def _cli(capsys, *argv) -> Tuple[int, str, str]:
    code = cli_main([str(a) for a in argv])
    got = capsys.readouterr()
    return code, got.out, got.err


@pytest.mark.parametrize("bad", ["/etc/passwd", "file", "file/sub"])
def test_mxtrt_build_fails_on_an_unusable_cache_dir(capsys, tmp_path, checkpoint, bad):
    (tmp_path / "file").write_text("x")
    target = bad if bad.startswith("/") else str(tmp_path / bad)
    before = Path("/etc/passwd").stat().st_mtime_ns
    code, out, err = _cli(capsys, "build", checkpoint, "--shape", "data=2,3,8,8", "--cache-dir", target)
    assert code != 0 and err.count("\n") == 1 and target in err and "Not a directory" in err, err
    assert Path("/etc/passwd").stat().st_mtime_ns == before


def test_mxtrt_build_fails_when_nothing_was_stored(capsys, tmp_path, checkpoint, monkeypatch):
    def refuse(self, key, *a, **k):
        raise CacheError("disk full (simulated)")

    monkeypatch.setattr(EngineCache, "put", refuse)
    code, out, err = _cli(capsys, "build", checkpoint, "--shape", "data=2,3,8,8", "--cache-dir", tmp_path / "c")
    assert code == 1 and "none stored" in err, (out, err)


# --------------------------------------------------------------------------- 2. links, metadata, permissions


def _victim(tmp_path: Path) -> Path:
    """A folder outside the cache with things a confused cache could damage."""
    v = tmp_path / "victim"
    v.mkdir()
    (v / "precious.txt").write_text("do not touch")
    (v / "1234-deadbeefdeadbeef").mkdir()  # looks like a staging leftover
    (v / "1234-deadbeefdeadbeef" / "data").write_text("mine")
    (v / "x.cache").write_text("timing of someone else")
    return v


@pytest.mark.parametrize("planted", ["tmp", "locks", "files", "files/timing", "shard", "entry"])
def test_links_in_the_tree_are_never_followed(tmp_path, caplog, planted):
    victim = _victim(tmp_path)
    d = tmp_path / "c"
    d.mkdir()
    rel = {"shard": KEY[:2], "entry": f"{KEY[:2]}/{KEY}"}.get(planted, planted)
    (d / rel).parent.mkdir(parents=True, exist_ok=True)
    os.symlink(victim, d / rel)
    before = _tree(victim)
    c = EngineCache(str(d))
    with caplog.at_level(logging.WARNING):
        assert c.probe() is None
        assert c.get(KEY) is None
        with c.lock(KEY):
            c.put(KEY, {"v": 1}, {"plan": b"p" * 1000})
        assert c.get(KEY).read("plan") == b"p" * 1000
        aux = c.path("timing/x.cache")
        Path(aux).write_text("mine")
        with c.work_dir() as w:
            Path(w, "f").write_text("scratch")
        c.clear()
    assert _tree(victim) == before
    assert not os.path.islink(d / rel)
    assert any("symbolic link" in m for m in _warnings(caplog))


def _valid_entry(root: Path) -> Path:
    c = EngineCache(str(root))
    c.put(KEY, {"v": "outside"}, {"plan": b"outside" * 100})
    return root / KEY[:2] / KEY


@pytest.mark.parametrize("planted", ["shard", "entry", "file", "meta"])
def test_links_to_a_valid_entry_elsewhere_are_not_read_nor_removed(tmp_path, caplog, planted):
    outside = _valid_entry(tmp_path / "other")
    before = _tree(tmp_path / "other")
    d = tmp_path / "c"
    c = EngineCache(str(d))
    if planted in ("shard", "entry"):
        target = outside.parent if planted == "shard" else outside
        link = d / KEY[:2] if planted == "shard" else d / KEY[:2] / KEY
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, link)
    else:
        c.put(KEY, {"v": "inside"}, {"plan": b"outside" * 100})  # same bytes: the digest would match
        name = "plan" if planted == "file" else "meta.json"
        mine = d / KEY[:2] / KEY / name
        if planted == "meta":
            (tmp_path / "other_meta.json").write_bytes(mine.read_bytes())
            target = tmp_path / "other_meta.json"
        else:
            target = outside / "plan"
        mine.unlink()
        os.symlink(target, mine)
    with caplog.at_level(logging.WARNING):
        assert c.get(KEY) is None
    assert len(_warnings(caplog)) == 1
    assert _tree(tmp_path / "other") == before
    assert c.put(KEY, {"v": "new"}, {"plan": b"new"}).read("plan") == b"new"
    assert _tree(tmp_path / "other") == before


def test_lock_file_link_is_not_opened(tmp_path, caplog):
    d = tmp_path / "c"
    (d / "locks").mkdir(parents=True)
    target = tmp_path / "created_through_link"
    os.symlink(target, d / "locks" / f"{KEY}.lock")
    c = EngineCache(str(d))
    with caplog.at_level(logging.WARNING):
        with c.lock(KEY):
            pass
    assert not target.exists()
    assert any("cannot lock" in m for m in _warnings(caplog))


def _edit_engine_meta(cache_dir: Path, change) -> None:
    (entry,) = _entry_dirs(cache_dir)
    rec = json.loads((entry / "meta.json").read_text())
    change(rec, entry)
    (entry / "meta.json").write_text(json.dumps(rec))


@pytest.mark.parametrize("damage", ["other_entry", "absolute", "no_meta", "no_engine", "meta_not_json"])
def test_metadata_never_names_a_path_and_bad_entries_are_rebuilt(monkeypatch, tmp_path, caplog, accel, damage):
    sym, args, aux, x = accel
    cache_dir = tmp_path / "c"
    monkeypatch.setenv("MXNET_TENSORRT_CACHE_DIR", str(cache_dir))
    _, good = _bind(sym, args, aux, x)

    def change(rec, entry):
        if damage == "other_entry":
            rec["meta"]["engine"]["file"] = f"../../{KEY[:2]}/{KEY}/model.onnx"
        elif damage == "absolute":
            rec["meta"]["engine"]["file"] = "/etc/passwd"
        elif damage == "no_meta":
            rec["meta"] = {}
        elif damage == "no_engine":
            rec["meta"]["engine"] = {"file": 3}

    if damage == "meta_not_json":
        (entry,) = _entry_dirs(cache_dir)
        (entry / "meta.json").write_text("{")
    else:
        _edit_engine_meta(cache_dir, change)
    opened: List[str] = []
    real_load = ort_backend.OnnxRuntimeBackend.load
    monkeypatch.setattr(ort_backend.OnnxRuntimeBackend, "load",
                        lambda self, meta, directory, opts: opened.append(str(meta.get("file"))) or
                        real_load(self, meta, directory, opts))
    with caplog.at_level(logging.WARNING):
        info, out = _bind(sym, args, aux, x)
    assert (info.builds, info.loads) == (1, 0) and not info.native_failures
    assert opened == [] and len(_warnings(caplog)) == 1
    np.testing.assert_array_equal(out, good)
    info, _ = _bind(sym, args, aux, x)  # the rebuilt engine replaced the bad entry
    assert (info.builds, info.loads) == (0, 1) and opened == ["model.onnx"]


_UMASK_SCRIPT = """
    import os, sys
    os.umask(int(sys.argv[2], 8))
    from mx_trt.cache import EngineCache, make_key
    c = EngineCache(sys.argv[1])
    assert c.probe() is None
    key = make_key({"m": 1})
    with c.lock(key):
        c.put(key, {}, {"plan": b"x" * 100})
    src = os.path.join(sys.argv[1], "..", "moved")
    with open(src, "wb") as f:
        f.write(b"y")
    os.chmod(src, 0o777)
    c.put(make_key({"m": 2}), {}, {"plan": src}, move=True)
    open(c.path("timing/t.cache"), "wb").close()
    with c.work_dir() as w:
        open(os.path.join(w, "f"), "wb").close()
"""


@pytest.mark.parametrize("umask", [0o077, 0o027, 0o022])
def test_files_and_folders_get_the_umask_and_no_wider(tmp_path, umask):
    d = tmp_path / "c"
    r = _run(_UMASK_SCRIPT, str(d), oct(umask)[2:], env={})
    assert r.returncode == 0, r.stderr
    seen = 0
    for p in [d, *d.rglob("*")]:
        st = os.lstat(p)
        mode = stat.S_IMODE(st.st_mode)
        base = 0o777 if stat.S_ISDIR(st.st_mode) else 0o666
        assert mode & ~(base & ~umask) == 0, (p, oct(mode))
        seen += 1
    assert seen > 8


# --------------------------------------------------------------------------- 2. export folders are read-only


@pytest.fixture
def exported(tmp_path, monkeypatch):
    monkeypatch.setenv("MXNET_USE_TENSORRT", "1")
    sym, args, aux, x = _model()
    out = tmp_path / "export"
    mx_trt.export_model(sym, mx.cpu(), {**args, **aux}, SHAPES, str(out))
    return out, _native(sym, args, aux, x), x


def test_export_has_no_scratch_folders_and_load_writes_nothing(exported):
    out, ref, x = exported
    engines_dir = out / "engines"
    assert not any((engines_dir / n).exists() for n in ("locks", "tmp", "files"))
    before = _tree(out)
    exe = mx_trt.load(str(out), mx.cpu())
    exe.arg_dict["data"][:] = x
    exe.forward(is_train=False)
    np.testing.assert_allclose(exe.outputs[0].asnumpy(), ref, rtol=1e-4, atol=1e-5)
    assert _tree(out) == before


def _engine_file(out: Path) -> Path:
    (entry,) = _entry_dirs(out / "engines")
    # The largest of the engine's own files (an ONNX Runtime entry may hold an empty data file).
    return max((p for p in entry.iterdir() if p.name != "meta.json"), key=lambda p: (p.stat().st_size, p.name))


def _flip_byte(out: Path) -> str:
    f = _engine_file(out)
    b = bytearray(f.read_bytes())
    b[len(b) // 2] ^= 0x01
    f.write_bytes(bytes(b))
    return f.name


def _truncate(out: Path) -> str:
    f = _engine_file(out)
    f.write_bytes(f.read_bytes()[:-1])
    return f.name


def _engine_file_link(out: Path) -> str:
    f = _engine_file(out)
    copy = out.parent / "copy"
    copy.write_bytes(f.read_bytes())
    f.unlink()
    os.symlink(copy, f)
    return f.name


def _meta_names_passwd(out: Path) -> str:
    _edit_engine_meta(out / "engines", lambda rec, e: rec["meta"]["engine"].update(file="/etc/passwd"))
    return "/etc/passwd"


def _meta_empty(out: Path) -> str:
    _edit_engine_meta(out / "engines", lambda rec, e: rec.update(meta={}))
    return "engine description"


def _entry_gone(out: Path) -> str:
    import shutil

    shutil.rmtree(_entry_dirs(out / "engines")[0])
    return "no cache entry"


def _manifest(change):
    def damage(out: Path) -> str:
        m = json.loads((out / "mx_trt.json").read_text())
        what = change(m)
        (out / "mx_trt.json").write_text(json.dumps(m))
        return what
    damage.__name__ = change.__name__
    return damage


def _symbol_elsewhere(m):
    m["symbol"] = "/etc/passwd"
    return "symbol"


def _key_not_hex(m):
    m["engines"][0]["key"] = "../../../etc"
    return "invalid cache key"


def _no_engines(m):
    del m["engines"]
    return "engines"


def _no_device_type(m):
    del m["device_type"]
    return "device_type"


def _symbol_garbage(out: Path) -> str:
    (out / "model-symbol.json").write_text("{\"nodes\": 3}")
    return "model-symbol.json"


def _symbol_missing(out: Path) -> str:
    (out / "model-symbol.json").unlink()
    return "model-symbol.json"


def _params_garbage(out: Path) -> str:
    (out / "model-0000.params").write_bytes(b"garbage" * 10)
    return "model-0000.params"


def _manifest_garbage(out: Path) -> str:
    (out / "mx_trt.json").write_text("[1, 2")
    return "mx_trt.json"


@pytest.mark.parametrize("damage", [
    _flip_byte, _truncate, _engine_file_link, _meta_names_passwd, _meta_empty, _entry_gone,
    _manifest(_symbol_elsewhere), _manifest(_key_not_hex), _manifest(_no_engines), _manifest(_no_device_type),
    _symbol_garbage, _symbol_missing, _params_garbage, _manifest_garbage,
], ids=lambda f: f.__name__.strip("_"))
def test_damaged_export_is_one_export_error_and_is_left_alone(exported, damage):
    out, _, _ = exported
    named = damage(out)
    before = _tree(out)
    with pytest.raises(ExportError) as info:
        mx_trt.load(str(out), mx.cpu())
    assert named in str(info.value), str(info.value)
    assert _tree(out) == before


# --------------------------------------------------------------------------- 3. nothing left behind


_KILLED = """
    import os, signal, sys
    import numpy as np
    import mxnet as mx
    import mx_trt
    from tests.reliability.test_cache_faults import _model, SHAPES

    def die(*a, **k):
        os.kill(os.getpid(), signal.SIGKILL)

    point = sys.argv[1]
    if point == "fsync":            # inside the cache's put, writing the entry's files
        os.fsync = die
    elif point == "save":           # the engine is built, its files are being saved
        from mx_trt.builder.backends import onnxruntime as o
        o.OrtEngine.save = die
    elif point == "session":        # inside ONNX Runtime's session creation
        import onnxruntime
        onnxruntime.InferenceSession = die
    sym, args, aux, x = _model()
    exe = sym.simple_bind(mx.cpu(), grad_req="null", shared_buffer={**args, **aux}, **SHAPES)
    print("not killed")
"""

_BIND = """
    import mxnet as mx
    import mx_trt
    from tests.reliability.test_cache_faults import _model, SHAPES
    sym, args, aux, x = _model()
    exe = sym.simple_bind(mx.cpu(), grad_req="null", shared_buffer={**args, **aux}, **SHAPES)
    info = mx_trt.bind_info(exe)
    assert info.engines and not info.native_failures, info.native_failures
    print(info.builds, info.loads)
"""


def _mx_trt_leftovers(folder: Path) -> List[str]:
    return sorted(n for n in os.listdir(folder) if n.startswith("mx_trt_"))


@pytest.mark.parametrize("point", ["fsync", "save", "session"])
def test_killed_mid_write_leaves_files_only_in_the_cache_tmp_and_they_are_swept(tmp_path, point):
    cache_dir, tmpdir = tmp_path / "c", tmp_path / "systmp"
    tmpdir.mkdir()
    env = {"MXNET_TENSORRT_CACHE_DIR": str(cache_dir), "TMPDIR": str(tmpdir)}
    r = _run(_KILLED, point, env=env)
    assert r.returncode == -signal.SIGKILL, (r.returncode, r.stdout, r.stderr[-2000:])
    assert _mx_trt_leftovers(tmpdir) == []  # nothing outside the cache
    assert os.listdir(cache_dir / "tmp"), "the kill should have left a staging folder"
    r = _run(_BIND, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["1", "0"]
    assert os.listdir(cache_dir / "tmp") == []
    assert _mx_trt_leftovers(tmpdir) == []
    assert len(_entry_dirs(cache_dir)) == 1


def test_killed_without_a_cache_leaves_a_pid_named_folder_swept_by_the_next_process(tmp_path):
    tmpdir = tmp_path / "systmp"
    tmpdir.mkdir()
    env = {"MXNET_TENSORRT_CACHE_DIR": "", "TMPDIR": str(tmpdir)}
    r = _run(_KILLED, "session", env=env)
    assert r.returncode == -signal.SIGKILL, r.stderr[-2000:]
    left = _mx_trt_leftovers(tmpdir)
    assert left and all(n.startswith("mx_trt_ort_") and n.split("_")[3].isdigit() for n in left), left
    r = _run(_BIND, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert _mx_trt_leftovers(tmpdir) == []


# --------------------------------------------------------------------------- 4. bad values are one clear line


@pytest.mark.parametrize("var, value, allowed", [
    ("MXNET_TENSORRT_CACHE_MAX_MB", "abc", "whole number of MiB"),
    ("MXNET_TENSORRT_CACHE_MAX_MB", "-5", "whole number of MiB"),
    ("MXNET_TENSORRT_CACHE_MAX_MB", "1.5", "whole number of MiB"),
    ("MXNET_TENSORRT_CACHE_DIR", "off", "path of a folder"),
    ("MXNET_TENSORRT_CACHE_DIR", "0", "path of a folder"),
    ("MXNET_TENSORRT_CACHE_DIR", "false", "path of a folder"),
])
def test_bad_environment_values(monkeypatch, tmp_path, caplog, capsys, accel, checkpoint, var, value, allowed):
    sym, args, aux, x = accel
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(var, value)
    with pytest.raises(CacheError) as info:
        EngineCache.from_settings(Settings.from_env())
    msg = str(info.value)
    assert var in msg and repr(value) in msg and allowed in msg and "\n" not in msg
    with caplog.at_level(logging.WARNING):
        bound, _ = _bind(sym, args, aux, x)
    assert bound.engines and not bound.native_failures
    (w,) = _warnings(caplog)
    assert var in w and repr(value) in w
    assert not (tmp_path / value).exists()
    code, _, err = _cli(capsys, "build", checkpoint, "--shape", "data=2,3,8,8")
    assert code == 2 and err.count("\n") == 1 and var in err


@pytest.mark.parametrize("value", ["", "   "])
def test_empty_max_mb_means_the_default(monkeypatch, tmp_path, value):
    from mx_trt.cache import DEFAULT_MAX_MB

    monkeypatch.setenv("MXNET_TENSORRT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("MXNET_TENSORRT_CACHE_MAX_MB", value)
    assert EngineCache.from_settings(Settings.from_env()).max_bytes == DEFAULT_MAX_MB << 20
