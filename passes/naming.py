"""Names of the IR's tensors, as the exported models and the fused nodes spell them.

One rule for every stage that names a tensor (the ONNX export, the fused
node's inputs, the calibration table, the measured rule's cut-out symbols):
a variable keeps its own name, an operator's output is ``<node>_output`` (or
``<node>_output<k>`` for a node with several outputs), as MXNet names them.
"""
from __future__ import annotations

from .ir import Entry, Graph

__all__ = ["entry_name"]


def entry_name(graph: Graph, e: Entry) -> str:
    """The tensor name of an entry: a variable's own name, else ``<node>_output[<k>]``.

    Args:
        graph: The graph holding ``e``.
        e: One output of one node of ``graph``.

    Returns:
        The name; O(1).
    """
    node = graph.nodes[e.node]
    if node.is_variable:
        return node.name
    return f"{node.name}_output{e.index}" if node.num_outputs > 1 else f"{node.name}_output"
