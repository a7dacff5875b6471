"""Build progress: a bar on a terminal, log lines otherwise."""
from __future__ import annotations

import io
import logging

from mx_trt.builder.progress import BuildProgress


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_bar_on_a_terminal():
    out = _Tty()
    p = BuildProgress(3, out)
    p.start(1, "trt_subgraph_1", 42)
    p.phase("Building engine", 2, 5)
    p.done()
    text = out.getvalue()
    assert "engine 2/3 trt_subgraph_1 (42 ops)" in text and "Building engine 2/5" in text
    assert text.endswith("\r")


def test_log_lines_when_not_a_terminal(caplog):
    out = io.StringIO()
    p = BuildProgress(2, out)
    with caplog.at_level(logging.INFO, logger="mx_trt.builder.progress"):
        p.start(0, "trt_subgraph_0", 7)
        p.phase("Building engine", 1, 3)
        p.done()
    assert out.getvalue() == ""
    assert any("trt_subgraph_0: Building engine 1/3" in r.getMessage() for r in caplog.records)
