"""The partition report: what goes to engines, what stays native and why (``mxtrt partition``).

* :mod:`.model` - :func:`build_report`: the :class:`PartitionReport` of a plan;
* :mod:`.text` - :func:`render_table`, :func:`report_to_json`;
* :mod:`.units`, :mod:`.layout` - what the drawing shows and where it goes;
* :mod:`.svg`, :mod:`.page` - :func:`render_svg`, :func:`render_html`.

All are pure functions over a :class:`mx_trt.pipeline.plan.Plan` (no MXNet, ONNX or engine calls).
Multiply-add estimates come from :mod:`mx_trt.passes.cost`.
"""
from __future__ import annotations

from mx_trt.tools.report.model import NativeNode, PartitionReport, SubgraphRow, TensorRef, build_report
from mx_trt.tools.report.page import render_html
from mx_trt.tools.report.svg import COLLAPSE_THRESHOLD, render_svg, subgraph_colors
from mx_trt.tools.report.text import format_count, render_table, report_to_json

__all__ = [
    "COLLAPSE_THRESHOLD",
    "NativeNode",
    "PartitionReport",
    "SubgraphRow",
    "TensorRef",
    "build_report",
    "format_count",
    "render_html",
    "render_svg",
    "render_table",
    "report_to_json",
    "subgraph_colors",
]
