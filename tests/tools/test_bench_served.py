"""What served an accelerated executor, as the benchmarks report it (mx_trt.runtime.twin.served_shares,
mx_trt.tools.cli.bench.served_text / served_cell)."""
from __future__ import annotations

import pytest

from mx_trt.runtime import twin
from mx_trt.tools.cli.bench import served_cell, served_note, served_text


class _Check:
    def __init__(self, served):
        self.served = served

    def stats(self):
        return {"served": dict(self.served)}


class _Exe:
    def __init__(self, served=None):
        if served is not None:
            self._mx_trt_check = _Check(served)


def test_shares_count_every_side_an_alternate_included():
    exe = _Exe({"engines": 10, "native": 10, "openvino fp32": 80})
    assert twin.served_shares(exe) == pytest.approx({"engines": 0.1, "native": 0.1, "openvino fp32": 0.8})
    # Native MXNet's share is of all forwards: an alternate that served most of them counts too.
    assert twin.served_shares(exe)["native"] == pytest.approx(0.1)
    assert twin.served_shares(_Exe({"engines": 5, "native": 0})) == {"engines": 1.0}  # sides that served none: left out
    assert twin.served_shares(_Exe({"engines": 0, "native": 0})) == {} and twin.served_shares(_Exe({"engines": 0})) == {}
    assert twin.served_shares(_Exe()) is None  # no check


def test_the_note_names_what_served_besides_the_kept_engines():
    assert served_text({"engines": 0.1, "native": 0.12, "openvino fp32": 0.78}) == "native 12%, openvino fp32 78%"
    assert served_text({"engines": 0.999, "native": 0.001}) == ""  # below half a percent: nothing to say
    assert served_text({"engines": 1.0}) == "" and served_text(None) == ""
    assert served_note({"engines": 0.9, "native": 0.1}) == " (served besides the kept engines: native 10%)"
    assert served_note({"engines": 1.0}) == ""


def test_a_row_cell_reads_the_shares_or_an_older_rows_native_share():
    row = {"served": {"default": {"engines": 0.2, "onnxruntime fp32": 0.8}, "equal threads": None},
           "native_served": {"default": 0.0, "equal threads": None}}
    assert served_cell(row, "default") == " (onnxruntime fp32 80%)"
    assert served_cell(row, "equal threads") == "" and served_cell(row, "missing") == ""
    assert served_cell({"native_served": {"default": 0.25}}, "default") == " (native 25%)"  # written before "served"
    assert served_cell({}, "default") == ""
