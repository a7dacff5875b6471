"""Export a subgraph of the IR to an ONNX model with the converter registry.

Weights become initializers, never graph inputs. Models whose initializers pass
protobuf's 2 GB limit are written with ONNX external data by :func:`save_model`.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

import numpy as np

from mx_trt.passes.ir import Entry, Graph
from mx_trt.passes.naming import entry_name

from mx_trt.export.converters import ConvContext, lookup
from mx_trt.export.spec import op_spec
from mx_trt.export.shapes import PluginShape, check_user_shapes, plugin_shapes_of
from mx_trt.errors import ConversionError, MissingWeightError, UnsupportedOpError

logger = logging.getLogger(__name__)

DEFAULT_OPSET = 17
#: Initializers of at least this many bytes are never copied into the ONNX protobuf (see ExportedSubgraph.external).
EXTERNAL_MIN_BYTES = 1024




@dataclass
class ExportedSubgraph:
    """An ONNX model for one subgraph and how it maps back to MXNet.

    Attributes:
        model: The ONNX model (small initializers inline, the others in ``external``).
        input_names: ONNX input names, in the order of the fused node's inputs.
        input_specs / output_specs: ``(name, bound shape, dtype)`` per input / output.
        batch_dim: The symbolic name of dimension 0 of every input and output when
            the model is batch-dynamic, else ``None``.
        plugin_shapes: MXNet's shapes of each plugin node (``-1``: the batch of a
            batch-dynamic model), which the backends check the plugin's results against.
        node_ops: MXNet node name -> its operator and, for user code, the
            converter (``Custom:my_op, user converter my_ops.f``), for run-time errors.
        output_names: ONNX output names, in the order of the fused node's outputs.
        origin: ONNX node name -> MXNet node name, for error messages.
        weight_bytes: Bytes of initializers.
        external: Initializers of at least :data:`EXTERNAL_MIN_BYTES`, kept out of
            the protobuf, by name: views over the caller's weights when used as
            they are, the exporter's arrays otherwise. The model refers to them as
            ONNX external data in the file ``external_location``: a backend reads
            them from memory, or has :func:`save_model` write that file beside the
            model; :func:`embedded_model` gives a self-contained copy.
    """

    model: Any
    input_names: List[str]
    output_names: List[str]
    origin: Dict[str, str] = field(default_factory=dict)
    weight_bytes: int = 0
    external: Dict[str, np.ndarray] = field(default_factory=dict)
    external_location: str = ""
    input_specs: List[Tuple[str, Tuple[int, ...], str]] = field(default_factory=list)
    output_specs: List[Tuple[str, Tuple[int, ...], str]] = field(default_factory=list)
    batch_dim: Optional[str] = None
    plugin_shapes: List[PluginShape] = field(default_factory=list)
    node_ops: Dict[str, str] = field(default_factory=dict)


def _np_to_onnx_dtype(dtype: Any) -> int:
    from onnx import helper

    return int(helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))


def export_subgraph(
    graph: Graph,
    node_ids: Sequence[int],
    inputs: Sequence[Entry],
    outputs: Sequence[Entry],
    weights: Mapping[str, np.ndarray],
    *,
    name: str = "mx_trt_subgraph",
    opset: int = DEFAULT_OPSET,
    dynamic_batch: Optional[str] = None,
) -> ExportedSubgraph:
    """Convert the nodes ``node_ids`` of ``graph`` to one ONNX model.

    Args:
        graph: The whole graph with inferred shapes and dtypes.
        node_ids: The subgraph's operator nodes (any order; emitted topologically).
        inputs: Entries produced outside the subgraph and consumed inside, in the
            fused node's input order. Weight variables are not among them.
        outputs: Entries produced inside and used outside (or graph outputs).
        weights: Bind-time values of weight variables, by name.
        name: The ONNX graph name.
        opset: ONNX opset.
        dynamic_batch: If set, dimension 0 of every input and output is the named
            dimension ``dynamic_batch`` instead of a fixed size.

    Returns:
        The :class:`ExportedSubgraph`.

    Raises:
        UnsupportedOpError: a node has no converter.
        MissingWeightError: a variable consumed inside is neither an input nor a weight.
        ConversionError: a converter failed; the message names the MXNet node. Or a
            user converter's output has another shape than MXNet infers (ONNX shape
            inference): ``user converter my_ops.f: output 0 has shape (2, 8, 1, 1),
            MXNet infers (2, 8, 16, 16)``.

    Complexity: O(nodes + edges) plus the converters' own work.
    """
    from onnx import TensorProto, helper, numpy_helper

    members: Set[int] = set(node_ids)
    order = sorted(members)
    input_set = set(inputs)
    nodes_out: List[Any] = []
    inits: Dict[str, Any] = {}
    origin: Dict[str, str] = {}
    used_names: Set[str] = set()
    weight_bytes = 0

    def unique(base: str) -> str:
        cand = base
        k = 1
        while cand in used_names:
            cand = f"{base}_{k}"
            k += 1
        used_names.add(cand)
        return cand

    in_names = [entry_name(graph, e) for e in inputs]
    for n in in_names:
        used_names.add(n)

    def add_const(arr: np.ndarray, nm: str) -> str:
        nonlocal weight_bytes
        inits[nm] = np.ascontiguousarray(arr)
        weight_bytes += arr.nbytes
        return nm

    # Weight variables consumed by the subgraph become initializers.
    for nid in order:
        node = graph.nodes[nid]
        for e in node.inputs:
            src = graph.nodes[e.node]
            if e in input_set or e.node in members:
                continue
            if not src.is_variable:
                raise ConversionError(f"subgraph {name}: node {node.name!r} consumes {src.name!r} which is neither inside nor an input")
            if src.name not in weights:
                raise MissingWeightError(
                    f"subgraph {name}: variable {src.name!r} (used by {node.name!r}) is not an input and has no value in shared_buffer"
                )
            if src.name not in inits:
                used_names.add(src.name)
                arr = np.asarray(weights[src.name])
                want = graph.dtypes.get(Entry(e.node, 0))
                if want and want != "unknown" and arr.dtype != np.dtype(want):
                    # The executor would hold the weight in the type MXNet inferred.
                    arr = arr.astype(want)
                add_const(arr, src.name)

    const_values_by_name = {k: np.asarray(weights[k]) for k in inits}
    batch = graph.shapes[inputs[0]][0] if dynamic_batch and inputs and graph.shapes.get(inputs[0]) else None
    user_outputs: List[Tuple[str, str, List[str], List[Any]]] = []  # (label, node, ONNX names, MXNet shapes)
    plugin_shapes: List[PluginShape] = []
    node_ops: Dict[str, str] = {}
    for nid in order:
        node = graph.nodes[nid]
        entry = lookup(node.op, node.attrs)
        if entry is None:
            raise UnsupportedOpError(f"subgraph {name}: no converter for {node.op} (node {node.name!r})")
        spec = op_spec(graph, nid, const_values_by_name)
        in_t = [entry_name(graph, e) for e in node.inputs]
        out_t = [entry_name(graph, Entry(nid, k)) for k in range(node.num_outputs)]
        for t in out_t:
            used_names.add(t)
        consts = {i: const_values_by_name[in_t[i]] for i in spec.const_inputs if in_t[i] in const_values_by_name}
        counter = [0]

        def add_node(op_type: str, ins: Sequence[str], outs: Sequence[str], attrs: Dict[str, Any], domain: str = "",
                     _node=node, _counter=counter) -> None:
            onnx_name = f"{_node.name}/{op_type}_{_counter[0]}"
            _counter[0] += 1
            clean = {k: v for k, v in attrs.items() if v is not None}
            tensor_attrs = {k: numpy_helper.from_array(np.asarray(v)) for k, v in clean.items() if isinstance(v, np.ndarray)}
            clean.update(tensor_attrs)
            nodes_out.append(helper.make_node(op_type, list(ins), list(outs), name=onnx_name, doc_string=_node.name,
                                              domain=domain or None, **clean))
            origin[onnx_name] = _node.name

        ctx = ConvContext(spec, in_t, out_t, opset, add_node, add_const, unique, consts)
        first = len(nodes_out)
        try:
            entry.converter(ctx)
        except ConversionError as exc:
            logger.error("converting %s node %r failed: %s", node.op, node.name, exc)
            raise ConversionError(f"{node.op} node {node.name!r}: {exc}") from exc
        except Exception as exc:  # a converter bug must name the node
            logger.error("converting %s node %r failed: %r", node.op, node.name, exc)
            raise ConversionError(f"{node.op} node {node.name!r}: {type(exc).__name__}: {exc}") from exc
        node_ops[node.name] = f"{node.op}, {entry.label}" if entry.is_user else node.op
        if entry.is_user:
            mx_shapes = [graph.shapes.get(Entry(nid, k)) for k in range(len(out_t))]
            user_outputs.append((entry.label, node.name, out_t, mx_shapes))
            known: Dict[str, Optional[Sequence[int]]] = dict(zip(in_t, spec.in_shapes))
            known.update(zip(out_t, mx_shapes))
            plugin_shapes += plugin_shapes_of(nodes_out[first:], known, batch)

    def vinfo(nm: str, e: Entry) -> Any:
        shape: List[Any] = list(graph.shapes[e])
        if dynamic_batch and shape:
            shape[0] = dynamic_batch
        return helper.make_tensor_value_info(nm, _np_to_onnx_dtype(graph.dtypes.get(e, "float32")), shape)

    g_inputs = [vinfo(n, e) for n, e in zip(in_names, inputs)]
    out_names: List[str] = []
    seen_out: Set[str] = set()
    for e in outputs:
        t = entry_name(graph, e)
        if t in seen_out or t in in_names:
            # An ONNX graph output must be a distinct tensor produced inside.
            alias = unique(f"{t}__out")
            nodes_out.append(helper.make_node("Identity", [t], [alias], name=f"{alias}/Identity"))
            origin[f"{alias}/Identity"] = graph.nodes[e.node].name
            t = alias
        seen_out.add(t)
        out_names.append(t)
    g_outputs = [vinfo(n, e) for n, e in zip(out_names, outputs)]

    # Converters may fold a weight into another constant (BatchNorm) or ignore it
    # (a label): keep only the initializers some node reads.
    referenced = {t for n in nodes_out for t in n.input}
    for nm in [k for k in inits if k not in referenced]:
        weight_bytes -= inits.pop(nm).nbytes

    # Weights are not copied into the protobuf: every initializer of at least
    # EXTERNAL_MIN_BYTES stays the numpy array it is (a view over the caller's
    # NDArray for a weight used as is), referenced as external data. Backends read
    # them from memory or have save_model write them beside the model.
    external: Dict[str, np.ndarray] = {}
    location = f"{name}.onnx.data"
    init_protos, weight_external = initializer_protos(inits, location)
    external.update(weight_external)
    g = helper.make_graph(nodes_out, name, g_inputs, g_outputs, initializer=init_protos)
    model = helper.make_model(
        g,
        producer_name="mx_trt",
        # Plugin nodes (mx_trt.export.plugins) live in their own domains, version 1.
        opset_imports=[helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in
                                                           sorted({n.domain for n in nodes_out if n.domain})],
    )
    model.ir_version = min(model.ir_version, 9)
    if user_outputs:
        check_user_shapes(model, user_outputs, dynamic_batch)
    def io_spec(n: str, e: Entry) -> Tuple[str, Tuple[int, ...], str]:
        return (n, tuple(graph.shapes[e]), graph.dtypes.get(e, "float32"))

    return ExportedSubgraph(model=model, input_names=in_names, output_names=out_names, origin=origin,
                            weight_bytes=weight_bytes, external=external, external_location=location if external else "",
                            input_specs=[io_spec(n, e) for n, e in zip(in_names, inputs)],
                            output_specs=[io_spec(n, e) for n, e in zip(out_names, outputs)],
                            batch_dim=dynamic_batch, plugin_shapes=plugin_shapes, node_ops=node_ops)


def initializer_protos(arrays: Mapping[str, np.ndarray], location: str) -> Tuple[List[Any], Dict[str, np.ndarray]]:
    """Initializer protos of ``arrays``: those of at least :data:`EXTERNAL_MIN_BYTES` as external
    data in ``location`` (page-aligned offsets, so readers may map them; the arrays are not copied),
    the others inline. Returns (the protos, the external arrays by name). O(inline bytes)."""
    from onnx import TensorProto, numpy_helper

    protos: List[Any] = []
    external: Dict[str, np.ndarray] = {}
    offset = 0
    for nm, arr in arrays.items():
        if arr.nbytes >= EXTERNAL_MIN_BYTES:
            t = TensorProto()
            t.name = nm
            t.data_type = _np_to_onnx_dtype(arr.dtype)
            t.dims.extend(arr.shape)
            t.data_location = TensorProto.EXTERNAL
            for k, v in (("location", location), ("offset", str(offset)), ("length", str(arr.nbytes))):
                kv = t.external_data.add()
                kv.key, kv.value = k, v
            external[nm] = arr
            offset += (arr.nbytes + 4095) // 4096 * 4096
        else:
            t = numpy_helper.from_array(np.asarray(arr, order="C"), nm)
        protos.append(t)
    return protos, external


def initializer_arrays(exported: ExportedSubgraph) -> Dict[str, np.ndarray]:
    """Every initializer by name: the external arrays as they are (no copy), the small inline ones decoded."""
    from onnx import numpy_helper

    out: Dict[str, np.ndarray] = {}
    for t in exported.model.graph.initializer:
        arr = exported.external.get(t.name)
        out[t.name] = arr if arr is not None else numpy_helper.to_array(t)
    return out


def embedded_model(exported: ExportedSubgraph) -> Any:
    """A self-contained copy of the model, every external initializer embedded (copies the weights).

    For tools and tests that want one ``ModelProto``; backends read the external
    arrays in place instead. Raises ValueError past protobuf's 2 GB limit.
    """
    from onnx import ModelProto, numpy_helper

    model = ModelProto()
    model.CopyFrom(exported.model)
    for t in model.graph.initializer:
        arr = exported.external.get(t.name)
        if arr is not None:
            t.CopyFrom(numpy_helper.from_array(np.ascontiguousarray(arr), t.name))
    return model


def save_model(exported: ExportedSubgraph, path: str) -> str:
    """Write the model to ``path`` and its external weights, if any, beside it.

    Returns ``path``, which ONNX Runtime and TensorRT's parser can load (they
    resolve external data relative to the model's folder).
    """
    with open(path, "wb") as f:
        f.write(exported.model.SerializeToString())
    if exported.external:
        data_path = os.path.join(os.path.dirname(path), exported.external_location)
        logger.info("writing %.1f MB of weights as external data to %s", exported.weight_bytes / 1e6, data_path)
        with open(data_path, "wb") as f:
            offset = 0
            for t in exported.model.graph.initializer:
                arr = exported.external.get(t.name)
                if arr is None:
                    continue
                want = int(next(kv.value for kv in t.external_data if kv.key == "offset"))
                f.write(b"\0" * (want - offset))
                f.write(arr.reshape(-1).view(np.uint8).data)
                offset = want + arr.nbytes
    return path
