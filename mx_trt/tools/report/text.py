"""The partition report as text and as JSON (``mxtrt partition`` and ``--json``)."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

from mx_trt.tools.report.model import PartitionReport, TensorRef


def format_count(x: float) -> str:
    """``1234567`` -> ``"1.23 M"``; small numbers as integers."""
    x = float(x)
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{x:.0f}"


def share(part: float, whole: float) -> float:
    """``part / whole``, 0 for an empty whole."""
    return part / whole if whole else 0.0


def shape_text(shape: Optional[Sequence[int]]) -> str:
    """``(1, 3, 8, 8)`` -> ``"(1, 3, 8, 8)"``; ``"(?)"`` for an unknown shape."""
    return "(" + ", ".join(str(d) for d in shape) + ")" if shape else "(?)"


def clip(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, ending in ``...`` when cut."""
    return text if len(text) <= width else text[: max(1, width - 3)] + "..."


def _names(refs: Sequence[TensorRef], width: int) -> str:
    return clip(", ".join(r.name for r in refs) or "-", width)


def render_table(report: PartitionReport, max_names: int = 6) -> str:
    """The human-readable report: summary, subgraph table, native operators by type.

    Args:
        report: The report.
        max_names: Node names listed per (op type, reason) before ``+N more``.
    """
    lines: List[str] = []
    ins = ", ".join(f"{k} {shape_text(v)}" for k, v in report.inputs.items())
    head = f"model: {report.model}" if report.model else "model"
    lines.append(f"{head}  inputs: {ins or '-'}" + (f"  backend: {report.backend}" if report.backend else ""))
    n_eng = len(report.engine_subgraphs)
    lines.append(
        f"operators: {report.ops_in_engines} of {report.total_ops} in {n_eng} engine{'s' if n_eng != 1 else ''} "
        f"({100 * share(report.ops_in_engines, report.total_ops):.1f}%); "
        f"multiply-adds (estimated): {format_count(report.macs_in_engines)} of {format_count(report.total_macs)} "
        f"in engines ({100 * share(report.macs_in_engines, report.total_macs):.1f}%)"
    )
    lines.append("")
    if report.subgraphs:
        table = [("id", "subgraph", "ops", "in", "inputs", "out", "outputs", "MACs", "precision", "op types")]
        for s in report.subgraphs:
            types = ", ".join(f"{k} {v}" for k, v in sorted(s.op_counts.items(), key=lambda kv: (-kv[1], kv[0])))
            name = s.name if s.failure is None else f"{s.name} (NATIVE: build failed)"
            table.append((str(s.id), name, str(s.ops), str(len(s.inputs)), _names(s.inputs, 36),
                          str(len(s.outputs)), _names(s.outputs, 36), format_count(s.macs), s.precision or "-",
                          clip(types, 60)))
        widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
        right = {0, 2, 3, 5, 7}
        for k, r in enumerate(table):
            cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))]
            lines.append("  ".join(cells).rstrip())
            if k == 0:
                lines.append("  ".join("-" * w for w in widths))
        for s in report.subgraphs:
            if s.failure is not None:
                lines.append(f"{s.name} failed to build and runs natively: {s.failure}")
            for node, why in sorted(s.kept_float.items()):
                lines.append(f"{s.name}: {node} stays in float: {why}")
    else:
        lines.append("no subgraph: every operator stays native")
    lines.append("")
    by_op = report.native_by_op()
    if not by_op:
        lines.append("native operators: none")
    else:
        lines.append(f"native operators ({len(report.native)}), by op type:")
        for op, reasons in by_op.items():
            count = sum(len(v) for v in reasons.values())
            lines.append(f"  {op} ({count})")
            for reason, names in reasons.items():
                shown = ", ".join(names[:max_names]) + (f" +{len(names) - max_names} more" if len(names) > max_names else "")
                lines.append(f"    {reason}: {shown}")
    return "\n".join(lines) + "\n"


def report_to_json(report: PartitionReport) -> Dict[str, Any]:
    """The report as plain JSON-serialisable data (``mxtrt partition --json``)."""

    def refs(rs: Sequence[TensorRef]) -> List[Dict[str, Any]]:
        return [{"name": r.name, "shape": list(r.shape) if r.shape else None} for r in rs]

    return {
        "model": report.model,
        "backend": report.backend,
        "inputs": {k: list(v) for k, v in report.inputs.items()},
        "ops": {"total": report.total_ops, "in_engines": report.ops_in_engines,
                "share": share(report.ops_in_engines, report.total_ops)},
        "macs": {"total": report.total_macs, "in_engines": report.macs_in_engines,
                 "share": share(report.macs_in_engines, report.total_macs)},
        "subgraphs": [
            {"id": s.id, "name": s.name, "ops": s.ops, "op_counts": s.op_counts, "nodes": s.nodes,
             "inputs": refs(s.inputs), "outputs": refs(s.outputs), "macs": s.macs,
             "engine": s.failure is None, "failure": s.failure, "precision": s.precision,
             "kept_float": dict(s.kept_float)}
            for s in report.subgraphs
        ],
        "native": {
            op: [{"node": name, "reason": reason} for reason, names in reasons.items() for name in names]
            for op, reasons in report.native_by_op().items()
        },
    }
