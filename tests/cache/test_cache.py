"""The on-disk engine cache: keys, round trips, integrity, atomicity, locking, LRU, environment.

Multi-process tests run small scripts with ``subprocess`` (each one imports
``mx_trt``, about a second); everything else works on ``tmp_path``.
"""
from __future__ import annotations

import errno
import json
import logging
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import List

import numpy as np
import pytest

from mx_trt import cache as cache_mod
from mx_trt.cache import DEFAULT_MAX_MB, CacheEntry, EngineCache, default_cache_dir, make_key
from mx_trt.settings import Settings
from mx_trt.errors import CacheError

REPO = Path(__file__).resolve().parents[2]
MIB = 1 << 20
KEY = make_key({"model": "k"})
K2 = make_key({"model": "k2"})


def _entry_dir(c: EngineCache, key: str) -> Path:
    return Path(c.directory) / key[:2] / key


def _tmp_leftovers(c: EngineCache) -> List[str]:
    tmp = Path(c.directory) / "tmp"
    return sorted(os.listdir(tmp)) if tmp.exists() else []


def _cache_warnings(caplog) -> List[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "mx_trt.cache" and r.levelno == logging.WARNING]


def _run_script(body: str, *args: str, env_extra=None) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO), **(env_extra or {}))
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(body), *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


# --------------------------------------------------------------------------- make_key


def test_make_key_is_hex_and_order_independent():
    a = make_key({"x": 1, "y": [1, 2], "s": {"b", "a", "c"}, "f": frozenset({3, 1})})
    b = make_key({"f": frozenset({1, 3}), "s": {"c", "a", "b"}, "y": (1, 2), "x": 1})
    assert a == b
    assert len(a) == 64 and all(ch in "0123456789abcdef" for ch in a)


@pytest.mark.parametrize("other", [
    {"x": 2, "y": "v"},
    {"x": 1, "y": "w"},
    {"x": 1, "y": "v", "z": None},
    {"x": 1.0, "y": "v"},      # 1 and 1.0 mean different settings
    {"x": True, "y": "v"},
    {"x": "1", "y": "v"},
    {"x": [1], "y": "v"},
    {"x": 1},
])
def test_make_key_changes_with_any_part(other):
    assert make_key({"x": 1, "y": "v"}) != make_key(other)


def test_make_key_changes_with_any_blob_byte():
    w = np.arange(64, dtype=np.float32)
    base = make_key({"m": 1}, [w, b"abc"])
    assert make_key({"m": 1}, [w.copy(), b"abc"]) == base
    w2 = w.copy()
    w2.view(np.uint8)[37] ^= 1
    assert make_key({"m": 1}, [w2, b"abc"]) != base
    assert make_key({"m": 1}, [w, b"abd"]) != base
    assert make_key({"m": 1}, [w]) != base
    assert make_key({"m": 1}, [b"abc", w]) != base


def test_make_key_array_dtype_and_shape_matter():
    raw = np.zeros(8, dtype=np.float32)
    keys = {
        make_key({}, [raw]),
        make_key({}, [raw.reshape(2, 4)]),
        make_key({}, [raw.view(np.int32)]),
        make_key({}, [raw.view(np.uint8)]),
        make_key({}, [raw.tobytes()]),      # same bytes as a plain blob
    }
    assert len(keys) == 5


def test_make_key_blob_boundaries_do_not_collide():
    assert make_key({}, [b"ab", b"c"]) != make_key({}, [b"a", b"bc"])
    assert make_key({}, [b"abc"]) != make_key({}, [b"ab", b"c"])
    assert make_key({"p": ["ab", "c"]}) != make_key({"p": ["a", "bc"]})


def test_make_key_non_contiguous_and_buffers():
    a = np.arange(12, dtype=np.float64).reshape(3, 4)
    assert make_key({}, [a.T]) == make_key({}, [np.ascontiguousarray(a.T)])
    assert make_key({}, [memoryview(b"xyz")]) == make_key({}, [b"xyz"]) == make_key({}, [bytearray(b"xyz")])
    assert make_key({}, [np.array(2.5)]) != make_key({}, [np.array([2.5])])
    assert make_key({}, [np.float32(2.5)]) == make_key({}, [np.array(2.5, dtype=np.float32)])


def test_make_key_numpy_scalars_and_dtypes():
    assert make_key({"n": np.int64(3), "d": np.dtype("float32")}) == make_key({"n": 3, "d": "float32"})


@pytest.mark.parametrize("parts", [{"o": object()}, {"d": {1: "x"}}, {"b": b"raw"}])
def test_make_key_rejects_values_without_canonical_form(parts):
    with pytest.raises(CacheError):
        make_key(parts)


def test_make_key_rejects_object_arrays():
    with pytest.raises(CacheError, match="object"):
        make_key({}, [np.array([object()])])


def test_make_key_stable_across_processes():
    parts = {"ops": {"conv", "relu", "pool", "fc", "softmax"}, "shape": (1, 3, 224, 224)}
    blob = np.arange(10, dtype=np.float16)
    here = make_key(parts, [blob])
    body = """
        import numpy as np
        from mx_trt.cache import make_key
        parts = {"shape": (1, 3, 224, 224), "ops": {"softmax", "fc", "pool", "relu", "conv"}}
        print(make_key(parts, [np.arange(10, dtype=np.float16)]))
    """
    procs = [_run_script(body, env_extra={"PYTHONHASHSEED": seed}) for seed in ("1", "2")]
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        assert out.strip() == here


# --------------------------------------------------------------------------- round trips


def test_put_get_bytes_and_meta(tmp_path):
    c = EngineCache(str(tmp_path / "c"))
    assert c.get(KEY) is None
    meta = {"inputs": [["data", [1, 3, 8, 8], "float32"]], "fp16": False, "shape": (2, 3)}
    e = c.put(KEY, meta, {"plan": b"\x00engine\xff" * 100, "empty": b""})
    got = c.get(KEY)
    assert isinstance(got, CacheEntry)
    assert got.meta == {"inputs": [["data", [1, 3, 8, 8], "float32"]], "fp16": False, "shape": [2, 3]}
    assert got.meta == e.meta
    assert got.read("plan") == b"\x00engine\xff" * 100
    assert got.read("empty") == b""
    assert got.files == {"plan": 800, "empty": 0}
    assert Path(got.file("plan")).parent == _entry_dir(c, KEY)
    assert json.loads((_entry_dir(c, KEY) / "meta.json").read_text())["format"] == 1
    with pytest.raises(CacheError, match="no file"):
        got.file("nope")
    assert _tmp_leftovers(c) == []


def test_put_from_path_copy_and_move(tmp_path):
    c = EngineCache(str(tmp_path / "c"))
    model = tmp_path / "model.onnx"
    data = tmp_path / "model.onnx.data"
    model.write_bytes(b"onnx" * 1000)
    data.write_bytes(os.urandom(3 * MIB + 7))  # more than one copy chunk
    e = c.put(KEY, {}, {"model.onnx": str(model), "model.onnx.data": data})
    assert model.exists() and data.exists()  # copied
    assert c.get(KEY).read("model.onnx.data") == data.read_bytes()
    assert e.files["model.onnx.data"] == 3 * MIB + 7

    expected = data.read_bytes()
    e2 = c.put(K2, {}, {"model.onnx.data": str(data)}, move=True)
    assert not data.exists()
    assert c.get(K2).read("model.onnx.data") == expected == e2.read("model.onnx.data")


def test_put_keeps_existing_entry(tmp_path):
    c = EngineCache(str(tmp_path / "c"))
    c.put(KEY, {"v": 1}, {"plan": b"first"})
    e = c.put(KEY, {"v": 2}, {"plan": b"second"})
    assert (e.meta, e.read("plan")) == ({"v": 1}, b"first")
    assert c.get(KEY).read("plan") == b"first"
    assert _tmp_leftovers(c) == []


@pytest.mark.parametrize("name", ["", "a/b", "../x", ".hidden", "meta.json", "x\0y"])
def test_put_rejects_bad_file_names(tmp_path, name):
    with pytest.raises(CacheError):
        EngineCache(str(tmp_path)).put(KEY, {}, {name: b"x"})


def test_put_rejects_bad_meta_and_sources(tmp_path):
    c = EngineCache(str(tmp_path))
    with pytest.raises(CacheError, match="JSON"):
        c.put(KEY, {"x": object()}, {})
    with pytest.raises(CacheError, match="expected bytes or a path"):
        c.put(KEY, {}, {"plan": 3})  # type: ignore[dict-item]
    assert c.get(KEY) is None


@pytest.mark.parametrize("key", ["abc", KEY.upper(), KEY[:-1] + "g", "../" + KEY[3:], KEY + "0", None, 12])
def test_bad_key(tmp_path, key):
    c = EngineCache(str(tmp_path))
    for call in (lambda: c.get(key), lambda: c.put(key, {}, {}), lambda: c.lock(key)):
        with pytest.raises(CacheError, match="invalid cache key"):
            call()


def test_path_for_auxiliary_files(tmp_path):
    c = EngineCache(str(tmp_path / "c"))
    p = c.path("timing/tensorrt-10.13-sm86.cache")
    assert p == c.path("timing/tensorrt-10.13-sm86.cache")
    assert p.startswith(c.directory + os.sep) and os.path.isdir(os.path.dirname(p))
    Path(p).write_bytes(b"timing")
    c.put(KEY, {}, {"plan": b"x"})
    assert [e.key for e in c.entries()] == [KEY]  # aux files are not entries
    for bad in ("", "/etc/passwd", "../x", "a/../../x", "a//b", "./a"):
        with pytest.raises(CacheError):
            c.path(bad)
    c.clear()
    assert not os.path.exists(p) and c.entries() == [] and c.total_bytes() == 0


# --------------------------------------------------------------------------- integrity


def _truncate(d: Path):
    p = d / "plan"
    p.write_bytes(p.read_bytes()[:-10])


def _flip(d: Path):
    p = d / "plan"
    b = bytearray(p.read_bytes())
    b[123] ^= 0x40
    p.write_bytes(bytes(b))


def _break_meta(d: Path):
    (d / "meta.json").write_text('{"format": 1, "key": ')


def _drop_file(d: Path):
    (d / "plan").unlink()


def _drop_meta(d: Path):
    (d / "meta.json").unlink()


def _escape_name(d: Path):
    rec = json.loads((d / "meta.json").read_text())
    rec["files"]["../../../evil"] = rec["files"].pop("plan")
    (d / "meta.json").write_text(json.dumps(rec))


def _no_format(d: Path):
    rec = json.loads((d / "meta.json").read_text())
    del rec["format"]
    (d / "meta.json").write_text(json.dumps(rec))


def _wrong_key(d: Path):
    rec = json.loads((d / "meta.json").read_text())
    rec["key"] = K2
    (d / "meta.json").write_text(json.dumps(rec))


@pytest.mark.parametrize("damage, what", [
    (_truncate, "bytes, expected"),
    (_flip, "fails its xxh3_128 check"),
    (_break_meta, "not valid JSON"),
    (_drop_file, "missing"),
    (_drop_meta, "meta.json is missing"),
    (_escape_name, "invalid file name"),
    (_wrong_key, "names key"),
    (_no_format, "no layout format"),
])
def test_corrupt_entry_is_removed_with_one_warning(tmp_path, caplog, damage, what):
    c = EngineCache(str(tmp_path / "c"))
    c.put(KEY, {"v": 1}, {"plan": os.urandom(4096), "aux": b"a"})
    damage(_entry_dir(c, KEY))
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="mx_trt.cache"):
        assert c.get(KEY) is None
    warnings = _cache_warnings(caplog)
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert KEY in warnings[0].getMessage() and what in warnings[0].getMessage()
    assert not _entry_dir(c, KEY).exists()
    assert _tmp_leftovers(c) == []
    caplog.clear()
    assert c.get(KEY) is None and not _cache_warnings(caplog)  # a plain miss now
    c.put(KEY, {"v": 2}, {"plan": b"fresh"})
    assert c.get(KEY).read("plan") == b"fresh"


def test_put_replaces_a_corrupt_entry(tmp_path, caplog):
    c = EngineCache(str(tmp_path / "c"))
    c.put(KEY, {"v": 1}, {"plan": b"x" * 500})
    _flip(_entry_dir(c, KEY))
    with caplog.at_level(logging.WARNING, logger="mx_trt.cache"):
        e = c.put(KEY, {"v": 2}, {"plan": b"new"})
    assert e.meta == {"v": 2} and c.get(KEY).read("plan") == b"new"
    assert len(_cache_warnings(caplog)) == 1


def test_other_layout_format_is_a_quiet_miss(tmp_path, caplog):
    c = EngineCache(str(tmp_path / "c"))
    c.put(KEY, {}, {"plan": b"x"})
    meta = _entry_dir(c, KEY) / "meta.json"
    rec = json.loads(meta.read_text())
    rec["format"] = 2
    meta.write_text(json.dumps(rec))
    with caplog.at_level(logging.INFO, logger="mx_trt.cache"):
        assert c.get(KEY) is None
    assert not _cache_warnings(caplog)
    assert any("layout format 2" in r.getMessage() for r in caplog.records)
    assert not _entry_dir(c, KEY).exists()


# --------------------------------------------------------------------------- atomicity


def _is_entry_dir(dst) -> bool:
    dst = os.fspath(dst)
    return len(os.path.basename(dst)) == 64 and len(os.path.basename(os.path.dirname(dst))) == 2


def test_failure_before_rename_leaves_nothing(tmp_path, monkeypatch, caplog):
    c = EngineCache(str(tmp_path / "c"))
    real_rename = os.rename

    def failing_rename(src, dst):
        if _is_entry_dir(dst):
            raise OSError(errno.EIO, "simulated failure at publish time")
        real_rename(src, dst)

    monkeypatch.setattr(cache_mod.os, "rename", failing_rename)
    with caplog.at_level(logging.WARNING, logger="mx_trt.cache"), pytest.raises(CacheError, match="simulated"):
        c.put(KEY, {}, {"plan": b"x" * 1000})
    assert len(_cache_warnings(caplog)) == 1
    monkeypatch.setattr(cache_mod.os, "rename", real_rename)
    assert c.get(KEY) is None and c.entries() == []
    assert _tmp_leftovers(c) == []


def test_crash_before_rename_is_invisible_and_swept(tmp_path):
    d = tmp_path / "c"
    body = """
        import os, sys
        from mx_trt import cache
        real = os.rename
        def crash(src, dst):
            dst = os.fspath(dst)
            if len(os.path.basename(dst)) == 64:   # publishing the entry: die right here
                os._exit(17)
            real(src, dst)
        cache.os.rename = crash
        c = cache.EngineCache(sys.argv[1])
        c.put(sys.argv[2], {}, {"plan": b"p" * 10000})
    """
    p = _run_script(body, str(d), KEY)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 17, err
    c = EngineCache(str(d))
    left = _tmp_leftovers(c)
    assert any(n.endswith(".lock") for n in left) and len(left) == 2, left  # staging dir + its lock
    assert c.get(KEY) is None and c.entries() == []
    c.put(K2, {}, {"plan": b"next"})  # the next put sweeps the dead process's staging
    assert _tmp_leftovers(c) == []
    assert c.get(K2).read("plan") == b"next"


def test_sweep_keeps_live_staging(tmp_path):
    c = EngineCache(str(tmp_path / "c"))
    os.makedirs(os.path.join(c.directory, "tmp"))
    live = cache_mod._Staging(os.path.join(c.directory, "tmp"), make_dir=True)
    try:
        c.put(KEY, {}, {"plan": b"x"})
        assert os.path.isdir(live.path)
    finally:
        live.close()
    assert _tmp_leftovers(c) == []


def test_sweep_orphans_removes_only_the_work_folders_of_dead_processes(tmp_path):
    import tempfile

    from mx_trt.fsutil import TMP_PREFIX

    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(done.stdout)
    mine = cache_mod.make_work_dir("mx_trt_ort_", str(tmp_path))
    orphan = tmp_path / f"mx_trt_ort_{dead}_a1b2_c3d"  # make_work_dir's form: 8 random characters after the pid
    orphan.mkdir()
    write = tmp_path / f"{TMP_PREFIX}{dead}_0123456789ab.tmp"  # an atomic write cut short
    write.write_bytes(b"x")
    # TemporaryDirectory(prefix="mx_trt_native_"): 8 random characters that here read like a pid and more.
    lookalike = tmp_path / ("mx_trt_native_" + f"{dead}_oppyoppy"[:max(8, len(str(dead)) + 2)])
    lookalike.mkdir()
    alive = Path(tempfile.mkdtemp(prefix="mx_trt_native_", dir=str(tmp_path)))
    assert cache_mod.sweep_orphans(str(tmp_path)) == 2
    assert not orphan.exists() and not write.exists()
    assert os.path.isdir(mine) and lookalike.is_dir() and alive.is_dir()


# --------------------------------------------------------------------------- I/O failures


def test_disk_full_is_a_warning_and_cache_error(tmp_path, monkeypatch, caplog):
    c = EngineCache(str(tmp_path / "c"))
    src = tmp_path / "model.onnx"
    src.write_bytes(b"m" * 100)

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(cache_mod.os, "fsync", full)
    with caplog.at_level(logging.WARNING, logger="mx_trt.cache"), pytest.raises(CacheError, match="No space"):
        c.put(KEY, {}, {"plan": b"x" * 100, "model.onnx": str(src)}, move=True)
    (w,) = _cache_warnings(caplog)
    assert KEY in w.getMessage() and "continuing without caching" in w.getMessage()
    assert src.exists()  # a failed move leaves the source alone
    monkeypatch.undo()
    assert c.get(KEY) is None and _tmp_leftovers(c) == []
    assert c.put(KEY, {}, {"plan": b"ok"}).read("plan") == b"ok"


def test_missing_source_file(tmp_path, caplog):
    c = EngineCache(str(tmp_path / "c"))
    with caplog.at_level(logging.WARNING, logger="mx_trt.cache"), pytest.raises(CacheError):
        c.put(KEY, {}, {"plan": str(tmp_path / "nope")})
    assert len(_cache_warnings(caplog)) == 1 and c.get(KEY) is None and _tmp_leftovers(c) == []


def test_read_only_cache(tmp_path, monkeypatch, caplog):
    d = tmp_path / "c"
    c = EngineCache(str(d))
    c.put(KEY, {}, {"plan": b"kept"})
    if os.geteuid() == 0:  # root ignores permission bits: fail the writes instead
        def denied(*a, **k):
            raise PermissionError(errno.EACCES, "Permission denied")
        for name in ("mkdir", "makedirs", "open"):
            monkeypatch.setattr(cache_mod.os, name, denied)
    else:
        for p in [d, *d.rglob("*")]:
            if p.is_dir():
                p.chmod(0o555)
    try:
        with caplog.at_level(logging.WARNING, logger="mx_trt.cache"):
            with pytest.raises(CacheError, match="Permission denied"):
                c.put(K2, {}, {"plan": b"new"})
            with c.lock(K2):  # degrades to a thread lock, with a warning
                pass
            assert c.get(KEY).read("plan") == b"kept"
        msgs = [r.getMessage() for r in _cache_warnings(caplog)]
        assert len(msgs) == 2 and K2 in msgs[0] and "cannot lock" in msgs[1]
    finally:
        for p in [d, *d.rglob("*")]:
            if p.is_dir():
                p.chmod(0o755)


# --------------------------------------------------------------------------- locking


_WORKER = """
    import os, sys, time
    from mx_trt.cache import EngineCache
    directory, key, builds, out, ready, go = sys.argv[1:]
    c = EngineCache(directory)
    open(ready, "w").close()
    while not os.path.exists(go):
        time.sleep(0.002)
    with c.lock(key):
        e = c.get(key)
        if e is None:
            with open(builds, "a") as f:
                f.write("built\\n")
            time.sleep(0.3)  # a slow build, so the others really wait
            e = c.put(key, {"by": os.getpid()}, {"plan": os.urandom(200000)})
        data = e.read("plan")
    with open(out, "wb") as f:
        f.write(data)
"""


def test_processes_build_once(tmp_path):
    n = 4
    d, builds, go = tmp_path / "c", tmp_path / "builds", tmp_path / "go"
    procs = [
        _run_script(_WORKER, str(d), KEY, str(builds), str(tmp_path / f"out{i}"), str(tmp_path / f"ready{i}"), str(go))
        for i in range(n)
    ]
    try:
        deadline = time.monotonic() + 60
        while not all((tmp_path / f"ready{i}").exists() for i in range(n)):
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs)
            time.sleep(0.01)
        go.touch()
        for p in procs:
            _, err = p.communicate(timeout=60)
            assert p.returncode == 0, err
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert builds.read_text().count("built") == 1
    outs = {(tmp_path / f"out{i}").read_bytes() for i in range(n)}
    assert len(outs) == 1 and len(outs.pop()) == 200000


def test_threads_build_once_and_lock_is_reentrant(tmp_path):
    c = EngineCache(str(tmp_path / "c"))
    other = EngineCache(str(tmp_path / "c"))  # a second instance on the same directory
    builds: List[int] = []
    results: List[bytes] = []

    def work(i):
        cc = c if i % 2 else other
        with cc.lock(KEY):
            with cc.lock(KEY):  # re-entrant within a thread
                e = cc.get(KEY)
                if e is None:
                    builds.append(i)
                    time.sleep(0.05)
                    e = cc.put(KEY, {}, {"plan": os.urandom(1000)})
            results.append(e.read("plan"))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    assert len(builds) == 1 and len(results) == 8 and len(set(results)) == 1


def test_locked_entries_are_not_evicted_or_cleared(tmp_path):
    c = EngineCache(str(tmp_path / "c"), max_bytes=1)
    c.put(KEY, {}, {"plan": b"a" * 100})
    with c.lock(KEY):
        c.put(K2, {}, {"plan": b"b" * 100})  # over the limit, but KEY is in use
        assert c.get(KEY) is not None
        c.clear()
        assert [e.key for e in c.entries()] == [KEY]
    c.clear()
    assert c.entries() == [] and c.total_bytes() == 0
    assert not os.listdir(os.path.join(c.directory, "locks"))


# --------------------------------------------------------------------------- LRU


def _put(c: EngineCache, name: str) -> str:
    key = make_key({"n": name})
    c.put(key, {"n": name}, {"plan": name.encode() * 1000})
    return key


def test_lru_eviction_and_get_refreshes(tmp_path):
    probe = EngineCache(str(tmp_path / "probe"))
    _put(probe, "a")
    one = probe.total_bytes()
    assert one > 1000

    c = EngineCache(str(tmp_path / "c"), max_bytes=int(2.5 * one))
    a, b = _put(c, "a"), _put(c, "b")
    assert c.get(a) is not None  # a is now more recent than b
    cc = _put(c, "c")
    assert {e.key for e in c.entries()} == {a, cc}
    assert c.total_bytes() <= c.max_bytes
    d = _put(c, "d")  # a was used before c was written
    assert [e.key for e in c.entries()] == [cc, d]  # least recently used first
    assert c.get(b) is None and c.get(a) is None


def test_entry_larger_than_limit_is_kept_with_warning(tmp_path, caplog):
    c = EngineCache(str(tmp_path / "c"), max_bytes=5000)
    small = _put(c, "s")
    with caplog.at_level(logging.WARNING, logger="mx_trt.cache"):
        c.put(KEY, {}, {"plan": b"z" * 20000})
    assert [e.key for e in c.entries()] == [KEY]
    assert c.get(small) is None
    (w,) = _cache_warnings(caplog)
    assert KEY in w.getMessage() and "MXNET_TENSORRT_CACHE_MAX_MB" in w.getMessage()


def test_no_limit(tmp_path):
    c = EngineCache(str(tmp_path / "c"), max_bytes=0)
    keys = [_put(c, str(i)) for i in range(5)]
    assert {e.key for e in c.entries()} == set(keys)


# --------------------------------------------------------------------------- environment


def test_default_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == str(tmp_path / "xdg" / "mx_trt")
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == str(tmp_path / "home" / ".cache" / "mx_trt")
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert default_cache_dir() == str(tmp_path / "home" / ".cache" / "mx_trt")


def test_from_env_directory(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("MXNET_TENSORRT_CACHE_DIR", raising=False)
    monkeypatch.delenv("MXNET_TENSORRT_CACHE_MAX_MB", raising=False)
    c = EngineCache.from_settings(Settings.from_env())
    assert c is not None and c.directory == default_cache_dir()
    assert c.max_bytes == DEFAULT_MAX_MB * MIB
    assert not os.path.exists(c.directory)  # nothing is created before the first write
    for off in ("", "  "):
        monkeypatch.setenv("MXNET_TENSORRT_CACHE_DIR", off)
        assert EngineCache.from_settings(Settings.from_env()) is None
    monkeypatch.setenv("MXNET_TENSORRT_CACHE_DIR", str(tmp_path / "mine"))
    assert EngineCache.from_settings(Settings.from_env()).directory == str(tmp_path / "mine")


@pytest.mark.parametrize("raw, want", [("10", 10 * MIB), (" 1 ", MIB), ("0", 0), ("", DEFAULT_MAX_MB * MIB)])
def test_from_env_max_mb(monkeypatch, tmp_path, raw, want):
    monkeypatch.setenv("MXNET_TENSORRT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("MXNET_TENSORRT_CACHE_MAX_MB", raw)
    assert EngineCache.from_settings(Settings.from_env()).max_bytes == want


@pytest.mark.parametrize("raw", ["-1", "abc", "1.5", "10MB"])
def test_from_env_max_mb_errors(monkeypatch, tmp_path, raw):
    monkeypatch.setenv("MXNET_TENSORRT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("MXNET_TENSORRT_CACHE_MAX_MB", raw)
    with pytest.raises(CacheError, match="MXNET_TENSORRT_CACHE_MAX_MB"):
        EngineCache.from_settings(Settings.from_env())


@pytest.mark.parametrize("bad", [-1, 1.5, True])
def test_constructor_rejects_bad_limits(tmp_path, bad):
    with pytest.raises(CacheError):
        EngineCache(str(tmp_path), max_bytes=bad)


def _record(d: Path):
    return json.loads((d / "meta.json").read_text())


def test_entries_record_a_fast_digest_and_older_sha256_entries_stay_readable(tmp_path):
    import hashlib

    c = EngineCache(str(tmp_path / "c"))
    plan = os.urandom(8192)
    c.put(KEY, {"v": 1}, {"plan": plan})
    d = _entry_dir(c, KEY)
    rec = _record(d)
    assert rec["files"]["plan"]["digest"].startswith("xxh3_128:") and "sha256" not in rec["files"]["plan"]
    # An entry written with the sha256 field only (the earlier layout of the record) is still verified and served.
    rec["files"]["plan"] = {"size": len(plan), "sha256": hashlib.sha256(plan).hexdigest()}
    (d / "meta.json").write_text(json.dumps(rec))
    assert c.get(KEY) is not None
    # ... and still caught when its file is damaged.
    (d / "plan").write_bytes(plan[:-1] + bytes([plan[-1] ^ 1]))
    assert c.get(KEY) is None and not d.exists()


def test_file_digests_fall_back_to_sha256_without_xxhash(tmp_path, monkeypatch):
    monkeypatch.setattr(cache_mod.fs, "_xxhash", None)
    c = EngineCache(str(tmp_path / "c"))
    c.put(KEY, {"v": 1}, {"plan": b"p" * 4096})
    assert _record(_entry_dir(c, KEY))["files"]["plan"]["digest"].startswith("sha256:")
    assert c.get(KEY) is not None


def test_an_unknown_digest_algorithm_is_a_malformed_entry(tmp_path, caplog):
    c = EngineCache(str(tmp_path / "c"))
    c.put(KEY, {"v": 1}, {"plan": b"p" * 4096})
    d = _entry_dir(c, KEY)
    rec = _record(d)
    rec["files"]["plan"]["digest"] = "md5:0123"
    (d / "meta.json").write_text(json.dumps(rec))
    with caplog.at_level(logging.WARNING):
        assert c.get(KEY) is None
    assert "malformed record" in caplog.text and not d.exists()
