"""Deeply nested JSON and calibration tables at the edges: typed errors, one warning, never a silent wrong table.

Before, ``'[' * 100000 + ']' * 100000`` raised ``RecursionError``: as a plan-cache
``meta.json`` the entry was never removed (every later bind fell back to
native), as an export's manifest ``mx_trt.load`` broke its contract, as a
calibration table int8 was dropped. Ranges of 1e38 or 1e-30 (constant outputs),
duplicate entries with conflicting ranges and an all-zero calibration were
accepted without a word; ``calibrate(out=...)`` into a missing folder named a
``.tmp`` path after calibrating and left files behind.
"""
from __future__ import annotations

import json
import logging
import os
import re

import mxnet as mx
import numpy as np
import pytest

import mx_trt
from mx_trt.errors import CalibrationError, ExportError
from mx_trt.export.calibration import load_table, table_from_json
from tests.reliability.test_cache_faults import _bind, _entry_dirs, accel  # noqa: F401 - the fixture

NESTED = "[" * 100000 + "]" * 100000
DIGEST = "0" * 64


def test_a_deeply_nested_plan_cache_meta_is_a_damaged_entry_removed_and_rebuilt(monkeypatch, tmp_path, accel):  # noqa: F811
    sym, args, aux, x = accel
    cache_dir = tmp_path / "c"
    monkeypatch.setenv("MXNET_TENSORRT_CACHE_DIR", str(cache_dir))
    _, good = _bind(sym, args, aux, x)
    (entry,) = _entry_dirs(cache_dir)
    (entry / "meta.json").write_text(NESTED)
    info, out = _bind(sym, args, aux, x)
    assert (info.builds, info.loads) == (1, 0) and not info.native_failures and len(info.engines) == 1
    np.testing.assert_array_equal(out, good)
    assert isinstance(json.loads((entry / "meta.json").read_text()), dict)  # replaced by the rebuilt entry
    info, _ = _bind(sym, args, aux, x)
    assert (info.builds, info.loads) == (0, 1)


def test_a_deeply_nested_export_manifest_is_an_export_error(tmp_path):
    sym = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=3, name="fc")
    out = tmp_path / "export"
    mx_trt.export_model(sym, mx.cpu(), {"fc_weight": mx.nd.ones((3, 4)), "fc_bias": mx.nd.zeros((3,))},
                        {"data": (1, 4)}, str(out))
    (out / "mx_trt.json").write_text(NESTED)
    with pytest.raises(ExportError, match="is damaged: its JSON is nested too deeply"):
        mx_trt.load(str(out), mx.cpu())


def test_a_deeply_nested_symbol_with_a_matching_digest_is_an_export_error(tmp_path):
    """Even with the manifest's digest forged to match: the symbol is read by mx_trt's JSON check first."""
    import hashlib

    sym = mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=3, name="fc")
    out = tmp_path / "export"
    mx_trt.export_model(sym, mx.cpu(), {"fc_weight": mx.nd.ones((3, 4)), "fc_bias": mx.nd.zeros((3,))},
                        {"data": (1, 4)}, str(out))
    manifest = json.loads((out / "mx_trt.json").read_text())
    (out / manifest["symbol"]).write_text(NESTED)
    manifest["files"][manifest["symbol"]] = {"size": len(NESTED),
                                             "sha256": hashlib.sha256(NESTED.encode()).hexdigest()}
    (out / "mx_trt.json").write_text(json.dumps(manifest))
    with pytest.raises(ExportError, match="not an MXNet symbol JSON \\(nested too deeply\\)"):
        mx_trt.load(str(out), mx.cpu())


def test_deeply_nested_profiles_are_one_clear_error(monkeypatch):
    from mx_trt.errors import MxTrtError
    from mx_trt.settings import Settings

    monkeypatch.setenv("MXNET_TENSORRT_PROFILES", NESTED)
    with pytest.raises(MxTrtError, match="is not valid JSON \\(nested too deeply\\)") as info:
        Settings.from_env()
    assert len(str(info.value)) < 400  # the value is shortened, not echoed whole


def _table(*rows):
    return {"format": "mx_trt.calibration/1", "graph_digest": DIGEST, "method": "minmax", "tensors": list(rows)}


def _row(amax, node=1, name="conv_output", lo=None):
    return {"node": node, "output": 0, "name": name, "min": -amax if lo is None else lo, "max": amax, "amax": amax}


def test_a_deeply_nested_calibration_table_is_a_calibration_error(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(NESTED)
    with pytest.raises(CalibrationError, match="is not valid JSON \\(nested too deeply\\)"):
        load_table(path)


@pytest.mark.parametrize("amax", [1e38, 1e-30])
def test_a_range_an_int8_scale_cannot_serve_is_refused_naming_the_tensor(amax):
    with pytest.raises(CalibrationError, match=re.escape(f"tensor conv_output: amax {amax:g} is outside")):
        table_from_json(_table(_row(amax)))
    table_from_json(_table(_row(1e-3), _row(1e3, node=2, name="fc_output")))  # ordinary ranges load


def test_duplicate_entries_with_conflicting_ranges_are_refused():
    with pytest.raises(CalibrationError, match=r"tensor conv_output has two entries with different ranges"):
        table_from_json(_table(_row(1.0), _row(2.0)))
    assert len(table_from_json(_table(_row(1.0), _row(1.0))).tensors) == 1  # the same entry twice: one tensor


def test_a_zero_range_in_a_table_is_one_warning_naming_the_tensor(caplog):
    with caplog.at_level(logging.WARNING, logger="mx_trt"):
        table_from_json(_table(_row(0.0, lo=0.0), _row(1.0, node=2, name="fc_output")))
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(lines) == 1 and "conv_output had a zero range" in lines[0] and "fc_output" not in lines[0]


def _fc():
    """data (2, 4) -> fc1 -> relu -> fc2: one subgraph, whose int8 export quantizes ``data`` and fc2's input."""
    h = mx.sym.relu(mx.sym.FullyConnected(mx.sym.var("data"), num_hidden=3, name="fc1"), name="relu")
    sym = mx.sym.FullyConnected(h, num_hidden=2, name="fc2")
    return sym, {"fc1_weight": mx.nd.ones((3, 4)), "fc1_bias": mx.nd.zeros((3,)),
                 "fc2_weight": mx.nd.ones((2, 3)), "fc2_bias": mx.nd.zeros((2,))}


def test_calibrating_on_all_zero_data_warns_once_naming_the_tensor(tmp_path, caplog):
    sym, args = _fc()
    with caplog.at_level(logging.WARNING, logger="mx_trt"):
        table = mx_trt.calibrate(sym, args, [np.zeros((2, 4), np.float32)] * 2, method="minmax", progress=False,
                                 engine_rule="always")
    zero = [r.getMessage() for r in caplog.records if "held only zeros" in r.getMessage()]
    assert table.tensors and all(r.amax == 0.0 for r in table.tensors.values())
    names = sorted(table.names.values())
    assert len(zero) == 1 and zero[0].startswith(f"calibrate: {', '.join(names)} held only zeros"), (names, zero)


def test_calibrate_into_a_missing_folder_names_it_before_calibrating_and_leaves_nothing(tmp_path):
    sym, args = _fc()
    calls = []

    def batches():
        calls.append(1)
        yield np.ones((2, 4), np.float32)

    out = tmp_path / "missing" / "table.json"
    with pytest.raises(CalibrationError, match=f"the folder {tmp_path / 'missing'} does not exist") as info:
        mx_trt.calibrate(sym, args, batches(), method="minmax", out=out, progress=False, engine_rule="always")
    assert ".tmp" not in str(info.value) and calls == []  # refused before any batch ran
    assert os.listdir(tmp_path) == []
    ok = tmp_path / "table.json"
    mx_trt.calibrate(sym, args, batches(), method="minmax", out=ok, progress=False, engine_rule="always")
    assert os.listdir(tmp_path) == ["table.json"]  # no temporary file left beside it
