"""The partition drawn as SVG: each subgraph in its own colour, native nodes labelled with their reason.

The layout is layered by topological depth (:mod:`.layout`). Graphs of
:data:`COLLAPSE_THRESHOLD` operators or more are drawn with every subgraph
contracted into one box that lists its operator counts, so large models stay
readable.
"""
from __future__ import annotations

import colorsys
import html
import math
from typing import Any, List, Optional, Set, Tuple

from mx_trt.tools.report.layout import LINE_H, PAD_Y, layout
from mx_trt.tools.report.model import PartitionReport
from mx_trt.tools.report.text import clip, share
from mx_trt.tools.report.units import MAX_OUTPUT_BOXES, Unit, build_units

#: Operator count from which :func:`render_svg` contracts each subgraph into one box.
COLLAPSE_THRESHOLD = 1000

NATIVE_FILL = "#f3f3f3"
_NATIVE_STROKE = "#c62828"
_IO_FILL = "#ffffff"
_EDGE = "#8a8a8a"
FONT = "DejaVu Sans, Helvetica, Arial, sans-serif"


def subgraph_colors(n: int) -> List[str]:
    """``n`` distinct light fill colours (hex), hues spread by the golden angle.

    Light enough for black text; the lightness cycles too so that colours stay
    distinct past a few dozen subgraphs.
    """
    out: List[str] = []
    seen: Set[str] = set()
    for i in range(n):
        hue = (i * 0.618033988749895) % 1.0
        light = (0.80, 0.70, 0.88, 0.75)[(i // 7) % 4]
        sat = (0.70, 0.55, 0.85)[(i // 28) % 3]
        k = 0
        while True:
            r, g, b = colorsys.hls_to_rgb((hue + k * 0.0031) % 1.0, light, sat)
            c = f"#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}"
            if c not in seen:
                break
            k += 1
        seen.add(c)
        out.append(c)
    return out


def esc(text: str) -> str:
    """``text`` escaped for SVG/HTML text and attribute values."""
    return html.escape(text, quote=True)


def render_svg(report: PartitionReport, plan: Any, collapse: Optional[bool] = None, title: Optional[str] = None) -> str:
    """Draw the graph: each subgraph in its own colour, native nodes labelled with their reason.

    Args:
        report: :func:`build_report` of ``plan``.
        plan: The plan (its graph gives the edges).
        collapse: Draw each subgraph as one box with its op counts; default:
            when the graph has :data:`COLLAPSE_THRESHOLD` operators or more.
        title: Heading; defaults to the model label.

    Returns:
        A standalone SVG document. Elements carry ``class`` (``op``,
        ``subgraph``, ``native``, ``input``, ``output``, ``edge``) and
        ``data-subgraph`` / ``data-reason`` attributes.
    """
    if collapse is None:
        collapse = report.total_ops >= COLLAPSE_THRESHOLD
    units, edges = build_units(report, plan, collapse)
    colors = subgraph_colors(len(report.subgraphs))
    lay = layout(units, edges)
    graph_w, graph_h = lay.width, lay.height

    # Header: title, summary, legend.
    head: List[str] = []
    margin = 16.0
    heading = title or (f"{report.model}" if report.model else "partition")
    summary = (f"{report.ops_in_engines}/{report.total_ops} ops and "
               f"{100 * share(report.macs_in_engines, report.total_macs):.1f}% of multiply-adds in "
               f"{len(report.engine_subgraphs)} engine(s); {len(report.native)} native"
               + ("; subgraphs collapsed" if collapse else "")
               + (f"; {len(plan.graph.heads)} graph outputs not drawn" if len(plan.graph.heads) > MAX_OUTPUT_BOXES else ""))
    legend_items: List[Tuple[str, str, str]] = [
        (colors[s.id], f"{s.name} ({s.ops} ops)", f"subgraph-{s.id}") for s in report.engine_subgraphs
    ]
    max_legend = 40
    more = len(legend_items) - max_legend
    legend_items = legend_items[:max_legend]
    legend_items.append((NATIVE_FILL, "native (MXNet)", "native"))
    item_w = 190.0
    width = max(graph_w + 2 * margin, 560.0)
    per_row = max(1, int((width - 2 * margin) // item_w))
    legend_rows = math.ceil(len(legend_items) / per_row) + (1 if more > 0 else 0)
    top = margin + 22 + 18 + legend_rows * 18 + 14
    height = top + graph_h + margin
    off_x = margin + (width - 2 * margin - graph_w) / 2

    out: List[str] = []
    out.append('<?xml version="1.0" encoding="UTF-8"?>')
    out.append(f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
               f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="{FONT}" font-size="11">')
    out.append("<defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" markerWidth=\"7\" "
               f"markerHeight=\"7\" orient=\"auto-start-reverse\"><path d=\"M0,0 L10,5 L0,10 z\" fill=\"{_EDGE}\"/>"
               "</marker></defs>")
    out.append(f'<rect x="0" y="0" width="{width:.0f}" height="{height:.0f}" fill="#ffffff"/>')
    out.append(f'<text x="{margin}" y="{margin + 14}" font-size="16" font-weight="bold">{esc(heading)}</text>')
    out.append(f'<text x="{margin}" y="{margin + 34}" font-size="12" fill="#333333">{esc(summary)}</text>')
    head.append("")
    ly = margin + 44
    for k, (color, label, cls) in enumerate(legend_items):
        lx = margin + (k % per_row) * item_w
        yy = ly + (k // per_row) * 18
        stroke = _NATIVE_STROKE if cls == "native" else "#555555"
        dash = ' stroke-dasharray="3,2"' if cls == "native" else ""
        out.append(f'<g class="legend" data-key="{cls}"><rect x="{lx:.1f}" y="{yy:.1f}" width="14" height="12" '
                   f'fill="{color}" stroke="{stroke}"{dash}/><text x="{lx + 20:.1f}" y="{yy + 10:.1f}">'
                   f'{esc(clip(label, 28))}</text></g>')
    if more > 0:
        yy = ly + math.ceil(len(legend_items) / per_row) * 18
        out.append(f'<text x="{margin}" y="{yy + 10:.1f}" fill="#555555">... and {more} more subgraphs</text>')

    def cx(u: Unit) -> float:
        return off_x + u.x + u.width / 2

    out.append('<g class="edges" fill="none">')
    for a, b in edges:
        ua, ub = units[a], units[b]
        x, y = cx(ua), top + ua.y + ua.height
        d = [f"M{x:.1f},{y:.1f}"]
        stops = [(off_x + bx, top + by0, top + by1) for bx, by0, by1 in lay.routes.get((a, b), [])]
        stops.append((cx(ub), top + ub.y - 1, top + ub.y - 1))
        for sx, sy0, sy1 in stops:
            mid = (y + sy0) / 2
            d.append(f"C{x:.1f},{mid:.1f} {sx:.1f},{mid:.1f} {sx:.1f},{sy0:.1f}")
            if sy1 > sy0:
                d.append(f"L{sx:.1f},{sy1:.1f}")
            x, y = sx, sy1
        out.append(f'<path class="edge" d="{" ".join(d)}" stroke="{_EDGE}" stroke-width="1" '
                   'marker-end="url(#arrow)"/>')
    out.append("</g>")

    for u in units:
        x, y = off_x + u.x, top + u.y
        attrs = f'class="{u.kind}"'
        if u.subgraph is not None:
            attrs += f' data-subgraph="{esc(report.subgraphs[u.subgraph].name)}"'
        if u.reason is not None:
            attrs += f' data-reason="{esc(u.reason)}"'
        out.append(f"<g {attrs}><title>{esc(u.title)}</title>")
        if u.kind in ("op", "subgraph"):
            fill = colors[u.subgraph] if u.subgraph is not None else NATIVE_FILL
            sw = "1.6" if u.kind == "subgraph" else "1"
            out.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{u.width:.1f}" height="{u.height:.1f}" rx="5" '
                       f'fill="{fill}" stroke="#444444" stroke-width="{sw}"/>')
        elif u.kind == "native":
            out.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{u.width:.1f}" height="{u.height:.1f}" rx="2" '
                       f'fill="{NATIVE_FILL}" stroke="{_NATIVE_STROKE}" stroke-width="1.4" stroke-dasharray="4,2"/>')
        else:
            out.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{u.width:.1f}" height="{u.height:.1f}" '
                       f'rx="{u.height / 2:.1f}" fill="{_IO_FILL}" stroke="#444444"/>')
        for k, line in enumerate(u.lines):
            ty = y + PAD_Y + (k + 1) * LINE_H - 3
            style = ""
            if k == 0:
                style = ' font-weight="bold"'
            elif u.kind == "native" and k >= 2:
                style = f' fill="{_NATIVE_STROKE}"'
            elif u.kind in ("op", "input", "output") or (u.kind == "native" and k == 1):
                style = ' fill="#333333"'
            out.append(f'<text x="{x + u.width / 2:.1f}" y="{ty:.1f}" text-anchor="middle"{style}>{esc(line)}</text>')
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out) + "\n"
