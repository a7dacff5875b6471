"""mx_trt.tools.report.units: the drawing's boxes, their text wrapped, and their order."""
from __future__ import annotations

import logging

import pytest

from mx_trt.tools.report.units import Unit, topo_sorted, wrap


@pytest.mark.parametrize("text, width, max_lines, expected", [
    ("", 10, 2, []),
    ("one two three", 20, 2, ["one two three"]),
    ("one two three", 7, 3, ["one two", "three"]),
    ("aaa bbbbbbbbb", 10, 1, ["aaa ..."]),  # cut after the first line, " ..." appended
    ("a_very_long_operator_name x", 8, 2, ["a_ver...", "x"]),
    ("alpha beta gamma delta", 11, 1, ["alpha be..."]),  # no room for " ...": clipped instead
])
def test_wrap(text, width, max_lines, expected):
    lines = wrap(text, width, max_lines)
    assert lines == expected
    assert all(len(line) <= width for line in lines) and len(lines) <= max_lines


def _units(n):
    return [Unit(key=i, kind="op", lines=[str(i)], title=str(i)) for i in range(n)]


def test_topo_sorted_orders_by_edges_then_by_creation_and_reindexes_the_edges():
    units = _units(4)
    # 3 -> 0, 2 -> 1: 2 and 3 have no inputs; of the ready ones the earliest created comes first.
    order, edges = topo_sorted(units, [(3, 0), (2, 1)])
    assert [u.key for u in order] == [2, 1, 3, 0]
    pos = {u.key: i for i, u in enumerate(order)}
    assert edges == sorted([(pos[3], pos[0]), (pos[2], pos[1])])
    assert all(a < b for a, b in edges)


def test_a_cycle_keeps_the_creation_order_with_a_warning(caplog):
    units = _units(3)
    with caplog.at_level(logging.WARNING):
        order, edges = topo_sorted(units, [(0, 1), (1, 0), (1, 2)])
    assert [u.key for u in order] == [0, 1, 2] and edges == [(0, 1), (1, 0), (1, 2)]
    assert "cycle" in caplog.text
