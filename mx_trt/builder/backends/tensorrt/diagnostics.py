"""Build failures that name the nodes: TensorRT's ONNX parser errors and log lines, mapped back to MXNet.

The exporter records, per ONNX node, the MXNet node it came from
(``exported.origin``, and the node's ``doc_string``); TensorRT names layers
after ONNX nodes, so both its parser errors and its build log lead back to
the MXNet graph.
"""
from __future__ import annotations

from typing import Any, List, Mapping, Sequence


def node_label(model: Any, origin: Mapping[str, str], index: int, node_name: str, op: str) -> str:
    """``ONNX node 'n' (Op) from MXNet node 'm'`` for a parser error's node index and/or name."""
    nodes = model.graph.node
    doc = ""
    if not node_name and 0 <= index < len(nodes):
        node_name = nodes[index].name
    if 0 <= index < len(nodes) and nodes[index].name == node_name:
        op = op or nodes[index].op_type
        doc = nodes[index].doc_string
    mx_node = origin.get(node_name) or doc
    label = f"ONNX node {node_name!r}" + (f" ({op})" if op else "")
    return label + (f" from MXNet node {mx_node!r}" if mx_node else " (no MXNet node recorded)")


def parser_error_messages(parser: Any, exported: Any) -> List[str]:
    """Every error of an ``OnnxParser``, each naming its ONNX node and the MXNet node it came from."""
    out: List[str] = []
    for i in range(int(parser.num_errors)):
        e = parser.get_error(i)
        code = e.code()
        code_name = getattr(code, "name", str(code))
        index = int(e.node())
        node_name = str(e.node_name() or "")
        if index < 0 and not node_name:
            out.append(f"model: {code_name}: {e.desc()}")
            continue
        label = node_label(exported.model, exported.origin, index, node_name, str(e.node_operator() or ""))
        out.append(f"{label}: {code_name}: {e.desc()}")
    return out


def mentioned_mx_nodes(messages: Sequence[str], origin: Mapping[str, str]) -> List[str]:
    """MXNet nodes whose ONNX node names appear in TensorRT's log lines (layer names derive from them)."""
    text = "\n".join(messages)
    return sorted({mx for onnx_name, mx in origin.items() if onnx_name and onnx_name in text})
