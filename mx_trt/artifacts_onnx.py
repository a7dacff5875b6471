"""The whole model as one ONNX file that runs without MXNet (:func:`export_onnx`, ``mxtrt export --onnx``).

Stages, in order (each names its module)::

    settings       Settings.from_env().with_options(options): the bind's own option parser (settings)
    analyze        the pass's analysis with the target backend's rules (pipeline.plan); no cost rule:
                   an export means every operator
    refuse         operators that do not convert -> NotConvertibleError, each with its reason
    int8           the calibration table checked against the graph, as at bind (pipeline.int8)
    export         every operator as one subgraph (export.dynamic.SubgraphExporter): batch-dynamic when
                   exporting at B and B+1 gives one graph; fp16, or int8 Q/DQ, as for an engine
    interface      inputs and outputs named as MXNet names them (list_inputs / list_outputs)
    opset          onnx.version_converter from the exporter's opset to the one asked for
    save           one file, or the weights as ONNX external data past a threshold (protobuf's 2 GB)

:func:`whole_model` is the part the Triton models without Python share
(:mod:`mx_trt.serving.engine_models`).
"""
from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple, Union

from mx_trt.builder.backends import BACKENDS, Backend
from mx_trt.errors import ExportError, NotConvertibleError
from mx_trt.export.dynamic import SubgraphExporter
from mx_trt.export.int8 import Int8Report
from mx_trt.export.subgraph import DEFAULT_OPSET, ExportedSubgraph, embedded_model, save_model
from mx_trt.passes.fuse import boundary
from mx_trt.passes.ir import Entry
from mx_trt.pipeline.int8 import int8_setup
from mx_trt.pipeline.plan import Plan, analyze
from mx_trt.pipeline.request import BindRequest
from mx_trt.pipeline.weights import LazyWeights, to_numpy
from mx_trt.settings import Settings

logger = logging.getLogger(__name__)

#: Lowest opset: the converters emit opset-17 operators (LayerNormalization, for one, exists from 17).
MIN_OPSET = 17
#: Highest opset: the newest that onnx 1.16 converts to and ONNX Runtime 1.19 runs.
MAX_OPSET = 21
#: Protobuf's limit on one serialized message; a model at least this large keeps its weights in a side file.
ONNX_MAX_BYTES = 2**31 - 1
#: Where the exporter starts; other opsets are converted from it.
EXPORT_OPSET = DEFAULT_OPSET

Params = Union[Mapping[str, Any], Tuple[Mapping[str, Any], Mapping[str, Any]]]


@dataclass
class WholeModel:
    """The whole graph exported as one ONNX model.

    Attributes:
        exported: The model (weights of at least 1 KB held as external arrays, see
            :class:`~mx_trt.export.subgraph.ExportedSubgraph`).
        plan: The analysis it came from.
        static_reason: Why the model has a fixed batch, when a dynamic one was asked
            for and the graph does not allow it; ``None`` otherwise.
        int8: What was quantized (int8 exports only).
        dropped: Inputs no operator reads (a training label), left out of the model.
    """

    exported: ExportedSubgraph
    plan: Plan
    static_reason: Optional[str] = None
    int8: Optional[Int8Report] = None
    dropped: List[str] = field(default_factory=list)


@dataclass
class OnnxExport:
    """What :func:`export_onnx` wrote.

    Attributes:
        path: The ONNX file.
        data_path: The external weights file beside it, or ``None`` (weights inside).
        inputs / outputs: ``(name, shape, dtype)``; a batch-dynamic model has ``"batch"`` as dimension 0.
        batch_dynamic: Whether dimension 0 of every input and output may vary.
        static_reason: Why not, when a dynamic batch was asked for.
        opset: The model's ONNX opset.
        precision: ``fp32``, ``fp16`` or ``int8`` (bf16 is refused: see :func:`export_onnx`).
        backend: Whose support rules (and int8 form) the export followed.
        bytes: Size of the model with its weights.
        quantized / kept_float: For int8: MXNet node names in int8, and those kept in float with why.
    """

    path: str
    data_path: Optional[str]
    inputs: List[Tuple[str, Tuple[Any, ...], str]]
    outputs: List[Tuple[str, Tuple[Any, ...], str]]
    batch_dynamic: bool
    static_reason: Optional[str]
    opset: int
    precision: str
    backend: str
    bytes: int
    quantized: List[str] = field(default_factory=list)
    kept_float: Dict[str, str] = field(default_factory=dict)

    def to_json(self) -> Dict[str, Any]:
        """A JSON-ready dict (shapes as lists)."""
        out = dataclasses.asdict(self)
        for k in ("inputs", "outputs"):
            out[k] = [{"name": n, "shape": list(s), "dtype": d} for n, s, d in getattr(self, k)]
        return out


def check_opset(opset: Any) -> int:
    """``opset`` if it is an integer from :data:`MIN_OPSET` to :data:`MAX_OPSET`.

    Raises:
        ExportError: anything else (the message names the default and the range).
    """
    if isinstance(opset, bool) or not isinstance(opset, int) or not MIN_OPSET <= opset <= MAX_OPSET:
        raise ExportError(f"opset={opset!r}: the export writes ONNX opsets {MIN_OPSET} to {MAX_OPSET} "
                          f"(default {EXPORT_OPSET})")
    return opset


def merged_params(params: Params) -> Dict[str, Any]:
    """One dict of weights and aux states from a dict, or from ``(arg_params, aux_params)``.

    Raises:
        ExportError: neither.
    """
    if isinstance(params, Mapping):
        return dict(params)
    if isinstance(params, (tuple, list)) and len(params) == 2 and all(isinstance(p, Mapping) for p in params):
        return {**params[0], **params[1]}
    raise ExportError("params must be a dict of arrays (arg and aux merged) or (arg_params, aux_params), "
                      f"got {type(params).__name__}")


def export_settings(options: Mapping[str, Any], where: str = "export_onnx") -> Settings:
    """The settings of an export: the environment, then ``options`` (:data:`mx_trt.settings.OPTIONS`).

    Every operator goes into the model whatever its size or cost, so the
    engine rule and the smallest subgraph size do not apply.

    Raises:
        MxTrtError: an unknown option or a bad value; CalibrationError: int8 without a table.
    """
    settings = Settings.from_env().with_options(options, where) if options else Settings.from_env()
    settings.check_int8()
    return dataclasses.replace(settings, engine_rule="always", min_subgraph_size=1)


def target_backend(settings: Settings) -> Backend:
    """The backend whose rules the file follows: the ``backend`` option, else ONNX Runtime.

    Only its rules are used (which operators and tensor types it takes, its int8
    form); nothing is built, so it need not be installed.
    """
    return BACKENDS[settings.backend or "onnxruntime"]()


def refuse_unconvertible(plan: Plan) -> None:
    """Raise :class:`NotConvertibleError` listing every operator the plan leaves native, with its reason."""
    if not plan.reasons:
        return
    g = plan.graph
    ops = [(g.nodes[nid].name, g.nodes[nid].op, why) for nid, why in sorted(plan.reasons.items())]
    total = len(g.op_nodes())
    lines = "\n".join(f"  {name} ({op}): {why}" for name, op, why in ops)
    raise NotConvertibleError(f"{len(ops)} of {total} operators do not convert, so the model cannot be exported "
                              f"whole (a bind keeps them native):\n{lines}", ops)


def _io(plan: Plan, order: Sequence[str]) -> Tuple[List[Entry], List[Entry]]:
    """The model's inputs (in ``order``, MXNet's list_inputs) and outputs (the graph's heads, in order).

    Raises:
        ExportError: an output that is a weight (an ONNX output must be computed or be an input).
    """
    g = plan.graph
    absorbed = plan.absorbed_ids()
    ins, _ = boundary(g, list(g.op_nodes()), absorbed)
    for e in g.heads:
        node = g.nodes[e.node]
        if node.is_variable and e.node in absorbed:
            raise ExportError(f"output {node.name!r} is a weight of the model, which an ONNX output cannot be")
        if node.is_variable and e not in ins:
            ins.append(e)
    pos = {name: k for k, name in enumerate(order)}
    ins.sort(key=lambda e: pos.get(g.nodes[e.node].name, len(pos)))
    return ins, list(g.heads)


def whole_model(symbol: Any, params: Mapping[str, Any], shapes: Mapping[str, Tuple[int, ...]], settings: Settings,
                backend: Backend, type_dict: Optional[Mapping[str, Any]] = None, dynamic_batch: bool = True,
                name: str = "model") -> WholeModel:
    """Export the whole graph as one ONNX model, with the pass's own analysis and exporter.

    Args:
        symbol: The MXNet symbol.
        params: Weights and aux states by name (NDArrays or numpy; each read once, as a copy).
        shapes: Data input shapes; dimension 0 is the batch.
        settings: Options (precision, calibration, exclusions); the engine rule and the smallest
            subgraph size do not apply.
        backend: Whose rules decide support and the int8 form.
        type_dict: Input dtypes, as for ``simple_bind`` (float32 by default).
        dynamic_batch: Make dimension 0 symbolic where exporting at B and B+1 gives one graph.
        name: The ONNX graph's name.

    Returns:
        The model with its outputs named as ``symbol.list_outputs()`` names them; inputs that no
        operator reads (a training label, whose shape MXNet infers) are left out.

    Raises:
        NotConvertibleError: some operators do not convert (each listed with its reason).
        CalibrationError: int8 without a table that fits the graph.
        ShapeError, ConversionError, MxTrtError: the analysis or a converter failed.
    """
    settings = dataclasses.replace(settings, engine_rule="always", min_subgraph_size=1)  # everything, whatever its cost
    shapes = complete_shapes(symbol, params, shapes)
    plan = analyze(BindRequest(symbol, shapes, params, settings, backend, type_dict=type_dict))
    refuse_unconvertible(plan)
    int8 = int8_setup(plan, settings, backend)
    graph = plan.graph
    ins, outs = _io(plan, symbol.list_inputs())
    nodes = list(graph.op_nodes())
    absorbed = plan.absorbed_ids()
    names = {graph.nodes[e.node].name for n in nodes for e in graph.nodes[n].inputs if e.node in absorbed}
    batch = next(iter(shapes.values()))[0] if shapes else 1
    ranges = [(1, batch, batch)] if dynamic_batch else []
    # Copies (asnumpy), not views: a CPU NDArray that oneDNN holds in its blocked layout (a Gluon weight
    # after an imperative forward) gave a view of the blocked bytes here; asnumpy reorders.
    exporter = SubgraphExporter(symbol, shapes, params, graph, LazyWeights(params, names, to_numpy), settings.fp16, ranges,
                                int8.export if int8 is not None else None)
    exported = exporter.export(name, nodes, ins, outs, graph, ranges)
    rename_outputs(exported, symbol.list_outputs())
    return WholeModel(exported, plan, exporter.static_reasons.get(name) if dynamic_batch else None,
                      exporter.int8_reports.get(name), drop_unused_inputs(exported))


def _tensor_names(graph: Any, into: Set[str]) -> None:
    """Every tensor name of an ONNX graph and of the graphs in its nodes' attributes (Loop, If, Scan bodies)."""
    into.update(v.name for v in list(graph.input) + list(graph.output) + list(graph.value_info))
    into.update(t.name for t in graph.initializer)
    for n in graph.node:
        into.update(n.input)
        into.update(n.output)
        for a in n.attribute:
            for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                _tensor_names(sub, into)


def _rename(graph: Any, old: str, new: str) -> None:
    """Rename tensor ``old`` to ``new`` everywhere in ``graph``, subgraph bodies included (they read outer names)."""
    for v in list(graph.input) + list(graph.output) + list(graph.value_info) + list(graph.initializer):
        if v.name == old:
            v.name = new
    for n in graph.node:
        for seq in (n.input, n.output):
            for k, t in enumerate(seq):
                if t == old:
                    seq[k] = new
        for a in n.attribute:
            for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                _rename(sub, old, new)


def rename_outputs(exported: ExportedSubgraph, names: Sequence[str]) -> None:
    """Name the model's outputs ``names`` (MXNet's ``list_outputs``), in place.

    A tensor inside that already holds one of the names is renamed out of the
    way. An output that is also a graph input keeps its ONNX name (logged).
    """
    g = exported.model.graph
    inputs = {v.name for v in g.input}
    for k, (have, want) in enumerate(zip(list(exported.output_names), names)):
        if have == want:
            continue
        if have in inputs or want in inputs:
            logger.warning("output %d keeps the ONNX name %r: MXNet's name %r is a graph input", k, have, want)
            continue
        used: Set[str] = set()
        _tensor_names(g, used)
        if want in used:
            spare, j = f"{want}__inner", 1
            while spare in used:
                spare, j = f"{want}__inner{j}", j + 1
            _rename(g, want, spare)
            exported.output_names = [spare if n == want else n for n in exported.output_names]
        _rename(g, have, want)
        exported.output_names[k] = want
    exported.output_specs = [(n,) + tuple(s[1:]) for n, s in zip(exported.output_names, exported.output_specs)]  # type: ignore[misc]


def drop_unused_inputs(exported: ExportedSubgraph) -> List[str]:
    """Remove graph inputs no node reads (a training label, say), in place; returns their names."""
    g = exported.model.graph
    read: Set[str] = set()
    _tensor_names_read(g, read)
    outputs = {v.name for v in g.output}
    unused = [v.name for v in g.input if v.name not in read and v.name not in outputs]
    if unused:
        kept = [v for v in g.input if v.name not in unused]
        del g.input[:]
        g.input.extend(kept)
        exported.input_names = [n for n in exported.input_names if n not in unused]
        exported.input_specs = [s for s in exported.input_specs if s[0] not in unused]
    return unused


def _tensor_names_read(graph: Any, into: Set[str]) -> None:
    for n in graph.node:
        into.update(n.input)
        for a in n.attribute:
            for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                _tensor_names_read(sub, into)


def convert_opset(exported: ExportedSubgraph, opset: int) -> None:
    """Convert the model to ``opset`` of the default domain with ONNX's version converter, in place.

    The converter drops external data, so the external initializers go through it
    as graph inputs of the same type and shape and come back as they were.

    Raises:
        ExportError: the converter cannot convert some operator.
    """
    import onnx
    from onnx import helper, version_converter

    have = next((o.version for o in exported.model.opset_import if o.domain in ("", "ai.onnx")), EXPORT_OPSET)
    if have == opset:
        return
    model = onnx.ModelProto()
    model.CopyFrom(exported.model)
    g = model.graph
    held = {t.name: t for t in g.initializer if t.name in exported.external}
    kept = [t for t in g.initializer if t.name not in held]
    del g.initializer[:]
    g.initializer.extend(kept)
    n_inputs = len(g.input)
    g.input.extend(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in held.values())
    try:
        converted = version_converter.convert_version(model, opset)
    except Exception as exc:  # onnx raises RuntimeError / ConvertError from C++
        raise ExportError(f"cannot convert the model from opset {have} to {opset}: {exc}") from exc
    out = onnx.ModelProto()
    out.CopyFrom(converted)
    inputs = list(out.graph.input)[:n_inputs]
    del out.graph.input[:]
    out.graph.input.extend(inputs)
    out.graph.initializer.extend(held.values())
    exported.model = out


def model_bytes(exported: ExportedSubgraph) -> int:
    """Bytes of the model with its weights embedded (without building that copy)."""
    return int(exported.model.ByteSize()) + sum(int(a.nbytes) for a in exported.external.values())


def save_onnx(exported: ExportedSubgraph, path: str, external_threshold: int = ONNX_MAX_BYTES) -> Optional[str]:
    """Write the model to ``path``: one file below ``external_threshold`` bytes, else with its weights
    (every initializer of at least 1 KB) in ``<file>.data`` beside it. Returns the data file or ``None``.

    Raises:
        ExportError: the file cannot be written, or a bad threshold.
    """
    if isinstance(external_threshold, bool) or not isinstance(external_threshold, int) \
            or not 0 <= external_threshold <= ONNX_MAX_BYTES:
        raise ExportError(f"external_threshold={external_threshold!r}: expected bytes from 0 to {ONNX_MAX_BYTES} "
                          "(protobuf's limit on one file)")
    folder = os.path.dirname(os.path.abspath(path))
    data_name = os.path.basename(path) + ".data"
    try:
        os.makedirs(folder, exist_ok=True)
        if not exported.external or model_bytes(exported) < external_threshold:
            with open(path, "wb") as f:
                f.write(embedded_model(exported).SerializeToString())
            return None
        for t in exported.model.graph.initializer:
            for kv in t.external_data:
                if kv.key == "location":
                    kv.value = data_name
        exported.external_location = data_name
        save_model(exported, path)
    except OSError as exc:
        raise ExportError(f"cannot write the ONNX model {path}: {exc.strerror or exc}") from exc
    return os.path.join(folder, data_name)


def _specs(graph: Any) -> List[Tuple[str, Tuple[Any, ...], str]]:
    from onnx import helper

    out = []
    for v in graph:
        t = v.type.tensor_type
        dims = tuple(d.dim_param if d.dim_param else int(d.dim_value) for d in t.shape.dim)
        out.append((v.name, dims, helper.tensor_dtype_to_np_dtype(t.elem_type).name))
    return out


def complete_shapes(symbol: Any, params: Mapping[str, Any], shapes: Mapping[str, Sequence[int]]) -> Dict[str, Tuple[int, ...]]:
    """``shapes`` plus those MXNet infers for the other inputs without a value (a training label, say).

    Unknown ones are left out (the analysis then names them); O(one MXNet shape inference).
    """
    out = {k: tuple(int(d) for d in v) for k, v in shapes.items()}
    rest = [n for n in symbol.list_inputs() if n not in params and n not in out]
    if not rest:
        return out
    known = {k: tuple(v.shape) for k, v in params.items()}
    known.update(out)
    try:
        args, _, aux = symbol.infer_shape_partial(**{k: v for k, v in known.items() if k in set(symbol.list_inputs())})
    except Exception:  # MXNet refuses the shapes: the analysis reports it
        return out
    inferred = dict(zip(symbol.list_arguments(), args or []))
    inferred.update(zip(symbol.list_auxiliary_states(), aux or []))
    for n in rest:
        s = inferred.get(n)
        if s and all(d > 0 for d in s):
            out[n] = tuple(int(d) for d in s)
    return out


def export_onnx(symbol: Any, params: Params, shapes: Mapping[str, Sequence[int]], path: str, *,
                type_dict: Optional[Mapping[str, Any]] = None, opset: int = EXPORT_OPSET, dynamic_batch: bool = True,
                external_threshold: int = ONNX_MAX_BYTES, **options: Any) -> OnnxExport:
    """Write the whole MXNet model as one ONNX file that ONNX Runtime or TensorRT runs without MXNet.

    Example::

        sym, arg_params, aux_params = mx.model.load_checkpoint("resnet", 0)
        mx_trt.export_onnx(sym, {**arg_params, **aux_params}, {"data": (1, 3, 224, 224)}, "resnet.onnx")
        mx_trt.export_onnx(sym, (arg_params, aux_params), {"data": (1, 3, 224, 224)}, "resnet-int8.onnx",
                           precision="int8", calibration="resnet-calib.json")

    Args:
        symbol: The MXNet symbol.
        params: Weights and aux states: one dict (NDArrays or numpy), or ``(arg_params, aux_params)``.
        shapes: Data input shapes by name; dimension 0 is the batch.
        path: The ONNX file to write.
        type_dict: Input dtypes, as for ``simple_bind`` (integer token ids, say); float32 by default.
        opset: ONNX opset of the file, :data:`MIN_OPSET` to :data:`MAX_OPSET` (default :data:`EXPORT_OPSET`).
        dynamic_batch: Make dimension 0 of every input and output symbolic (``"batch"``) where the graph
            allows it (exported at B and B+1, the graphs must agree); otherwise, or with ``False``, the
            file is static at the given batch, with a log line saying why.
        external_threshold: From this many bytes, weights go to ``<path>.data`` beside the file
            (ONNX external data); the default is protobuf's 2 GB limit.
        **options: The options of a bind (:data:`mx_trt.settings.OPTIONS`): ``precision='fp16'|'int8'``,
            ``calibration=`` a table from :func:`mx_trt.calibrate`, ``exclude_ops``, ``int8_exclude_ops``,
            ``backend='tensorrt'`` (whose support rules and int8 form to follow; ONNX Runtime's by default), ...

    Returns:
        What was written (:class:`OnnxExport`). Inputs are named as the symbol's inputs, outputs as
        ``symbol.list_outputs()``; inputs no operator reads (a training label) are left out.

    Raises:
        NotConvertibleError: some operators do not convert; ``.operators`` lists (node, op, reason).
        CalibrationError: int8 without a table that fits the graph.
        ExportError: a bad opset, params or threshold, an opset conversion that fails, or a file that cannot
            be written.
        MxTrtError: a bad option, or shapes that do not fit the model (``precision='bf16'``: ExportError).
    """
    opset = check_opset(opset)
    params = merged_params(params)
    settings = export_settings(options)
    if settings.bf16:
        raise ExportError("export_onnx: bf16 is a precision of engines, not of an ONNX file: the backends that compute "
                         "in bfloat16 take the float32 graph and are told so (OpenVINO's INFERENCE_PRECISION_HINT='bf16', "
                         "TensorRT's BF16 flag); write the float32 file and ask its runtime for bf16, or store bf16 "
                         "engines with `mxtrt export PREFIX FOLDER --precision bf16` (mx_trt.export_model)")
    backend = target_backend(settings)
    name = os.path.splitext(os.path.basename(path))[0] or "model"
    whole = whole_model(symbol, params, {k: tuple(int(d) for d in v) for k, v in shapes.items()}, settings, backend,
                        type_dict=type_dict, dynamic_batch=dynamic_batch, name=name)
    exported = whole.exported
    for unused in whole.dropped:
        logger.info("%s: input %r is read by no operator (a training label?): left out of the ONNX model", path, unused)
    if whole.static_reason is not None:
        batch = exported.input_specs[0][1][0] if exported.input_specs and exported.input_specs[0][1] else "?"
        logger.info("%s: static batch %s, not batch-dynamic: %s", path, batch, whole.static_reason)
    convert_opset(exported, opset)
    data_path = save_onnx(exported, path, external_threshold)
    g = exported.model.graph
    result = OnnxExport(path=path, data_path=data_path, inputs=_specs(g.input), outputs=_specs(g.output),
                        batch_dynamic=exported.batch_dim is not None, static_reason=whole.static_reason, opset=opset,
                        precision=settings.precision, backend=backend.name, bytes=model_bytes(exported),
                        quantized=list(whole.int8.quantized) if whole.int8 else [],
                        kept_float=dict(whole.int8.kept_float) if whole.int8 else {})
    logger.info("wrote %s: %d operators, opset %d, %s, %s%s", path, len(whole.plan.graph.op_nodes()), opset,
                settings.precision, "batch-dynamic" if result.batch_dynamic else "static batch",
                f", weights in {data_path}" if data_path else "")
    return result


def describe_refusal(exc: NotConvertibleError, limit: int = 0) -> str:
    """The refusal as lines ``node (op): reason``; with ``limit``, only the first ``limit`` and a count."""
    ops = exc.operators if not limit else exc.operators[:limit]
    text = "; ".join(f"{n} ({op}): {why}" for n, op, why in ops)
    return text + (f"; and {len(exc.operators) - limit} more" if limit and len(exc.operators) > limit else "")


__all__ = ["export_onnx", "whole_model", "OnnxExport", "WholeModel", "MIN_OPSET", "MAX_OPSET", "ONNX_MAX_BYTES"]
