"""The partition report as a standalone HTML page: the summary, the tables and the SVG drawing."""
from __future__ import annotations

from typing import Any, Optional

from mx_trt.tools.report.model import PartitionReport
from mx_trt.tools.report.svg import FONT, NATIVE_FILL, esc, render_svg, subgraph_colors
from mx_trt.tools.report.text import format_count, report_to_json


def render_html(report: PartitionReport, plan: Any, collapse: Optional[bool] = None) -> str:
    """A standalone HTML page: the summary, the tables and the SVG drawing."""
    data = report_to_json(report)
    rows = []
    for s in report.subgraphs:
        color = subgraph_colors(len(report.subgraphs))[s.id] if report.subgraphs else NATIVE_FILL
        types = ", ".join(f"{k} {v}" for k, v in s.op_counts.items())
        state = "engine" if s.failure is None else f"native: {s.failure}"
        rows.append(
            f"<tr><td><span class=sw style=\"background:{color}\"></span>{s.id}</td><td>{esc(s.name)}</td>"
            f"<td class=n>{s.ops}</td><td>{esc(', '.join(r.name for r in s.inputs))}</td>"
            f"<td>{esc(', '.join(r.name for r in s.outputs))}</td><td class=n>{esc(format_count(s.macs))}</td>"
            f"<td>{esc(types)}</td><td>{esc(state)}</td></tr>"
        )
    native_rows = []
    for op, reasons in report.native_by_op().items():
        for reason, names in reasons.items():
            native_rows.append(f"<tr><td>{esc(op)}</td><td>{esc(reason)}</td><td class=n>{len(names)}</td>"
                               f"<td>{esc(', '.join(names))}</td></tr>")
    svg = render_svg(report, plan, collapse=collapse).split("\n", 1)[1]  # drop the XML declaration
    ops, macs = data["ops"], data["macs"]
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>mx_trt partition: {esc(report.model)}</title>
<style>
body {{ font-family: {FONT}; margin: 1.5em; color: #222; }}
table {{ border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 13px; }}
th, td {{ border: 1px solid #ccc; padding: 3px 7px; text-align: left; vertical-align: top; }}
td.n {{ text-align: right; }}
.sw {{ display: inline-block; width: 12px; height: 12px; margin-right: 5px; border: 1px solid #555; }}
.drawing {{ overflow: auto; border: 1px solid #ddd; }}
</style></head><body>
<h1>Partition of {esc(report.model or "the model")}</h1>
<p>Backend: {esc(report.backend or "-")}. Operators in engines: {ops["in_engines"]} of {ops["total"]}
({100 * ops["share"]:.1f}%). Estimated multiply-adds in engines: {esc(format_count(macs["in_engines"]))}
of {esc(format_count(macs["total"]))} ({100 * macs["share"]:.1f}%).</p>
<h2>Subgraphs</h2>
<table><tr><th>id</th><th>name</th><th>ops</th><th>inputs</th><th>outputs</th><th>MACs</th><th>op types</th><th>runs as</th></tr>
{chr(10).join(rows) or "<tr><td colspan=8>none</td></tr>"}
</table>
<h2>Native operators</h2>
<table><tr><th>op type</th><th>reason</th><th>count</th><th>nodes</th></tr>
{chr(10).join(native_rows) or "<tr><td colspan=4>none</td></tr>"}
</table>
<h2>Graph</h2>
<div class="drawing">
{svg}</div>
</body></html>
"""
