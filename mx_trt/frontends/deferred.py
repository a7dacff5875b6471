"""TensorRT symbols whose engines are built at the bind that brings the shapes (MXNet 1.5 to 1.9.1).

MXNet's own integration, from 1.5 on, split acceleration in two steps::

    trt_sym = sym.get_backend_symbol('TensorRT')                 # 1.5 to 1.8
    arg_params, aux_params = mx.contrib.tensorrt.init_tensorrt_params(trt_sym, arg_params, aux_params)
    exe = trt_sym.simple_bind(ctx, data=shape, grad_req='null')
    exe.copy_params_from(arg_params, aux_params)

    trt_sym = sym.optimize_for('TensorRT', args=arg_params, aux=aux_params, ctx=ctx)   # 1.8, 1.9.1
    exe = trt_sym.simple_bind(ctx, data=shape, grad_req='null')

The symbol of the first step already shows its TensorRT regions as single
nodes, and the weights travel with it; the engines are built at the bind. Here
:func:`defer` makes such a symbol: each region that the converters cover
becomes one *placeholder* node (an MXNet ``Custom`` node of type
:data:`PLACEHOLDER_OP` holding the region as a symbol JSON,
:mod:`mx_trt.graph.splice`), and the weights given by ``optimize_for`` or
:func:`attach` (``init_tensorrt_params``) are kept under the symbol's token.
Any bind of such a symbol (:func:`deferred_simple_bind`, hooked into
``Symbol.simple_bind`` whatever ``MXNET_USE_TENSORRT`` says) expands the
regions back, runs the pass on the whole graph with the shapes now known (so
the engines may span more or less than the placeholders did), and loads every
weight and aux state into the executor: ``copy_params_from`` afterwards is
allowed and not needed.

Tokens and their weights are process-local, as MXNet's own (it stored NDArray
handles in the nodes' attributes). A placeholder symbol saved and loaded
elsewhere still binds (its regions run natively until it is bound through
``simple_bind`` with weights in ``shared_buffer`` or ``copy_params_from``).
"""
from __future__ import annotations

import json
import logging
import re
import secrets
import threading
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from mx_trt.errors import ConversionError, MxTrtError
from mx_trt.export.converters import registry
from mx_trt.export.spec import OpSpec
from mx_trt.frontends import hook
from mx_trt.frontends.common import call_settings, grad_requests, scoped_options
from mx_trt.frontends.simple_bind import accelerated_simple_bind, weights_carried
from mx_trt.graph import splice
from mx_trt.graph.importer import graph_to_json, inference_identity
from mx_trt.passes.ir import Entry, Graph, Node
from mx_trt.passes.naming import entry_name
from mx_trt.passes.fuse import fuse
from mx_trt.passes.partition import partition
from mx_trt.pipeline.measure import subgraph_graph
from mx_trt.pipeline.weights import load_weights
from mx_trt.runtime.fused_op import holds_fused_nodes

logger = logging.getLogger(__name__)

#: ``op_type`` of the placeholder nodes.
PLACEHOLDER_OP = "_mx_trt_tensorrt"
#: Hidden attribute naming the token of a symbol without placeholders (``optimize_for`` found no region).
TOKEN_HIDDEN = "__mx_trt_token__"
#: Regions smaller than this stay as they are in the placeholder symbol (the bind decides anyway).
MIN_REGION = 2


@dataclass
class Captured:
    """What travels with a placeholder symbol's token.

    Attributes:
        params: Weights and aux states by name (the caller's arrays, not copies).
        options: Options of ``optimize_for`` (``precision``, ``calibration_iters``, ...);
            empty for ``get_backend_symbol``, whose binds read the settings in force then.
        native_reason: Set when the pass could not be prepared: the bind is native,
            with these weights loaded.
    """

    params: Dict[str, Any] = field(default_factory=dict)
    options: Dict[str, Any] = field(default_factory=dict)
    native_reason: Optional[str] = None


_lock = threading.Lock()
_captured: Dict[str, Captured] = {}
_any = False  # a placeholder symbol was made in this process: only then is every bind checked


def _new_token(captured: Captured) -> str:
    global _any
    token = secrets.token_hex(8)
    with _lock:
        _captured[token] = captured
        _any = True
    return token


def release_tokens(tokens: Sequence[str]) -> int:
    """Forget the weights kept for these tokens; returns how many were known."""
    with _lock:
        return sum(_captured.pop(t, None) is not None for t in tokens)


# --------------------------------------------------------------------------- making placeholder symbols


def _ir(data: Mapping[str, Any]) -> Graph:
    """The JSON's topology as IR (no shapes: the placeholder partition looks at operators only)."""
    nodes_json = data["nodes"]
    nouts: Dict[int, int] = {}
    for n in nodes_json:
        for e in n["inputs"]:
            nouts[int(e[0])] = max(nouts.get(int(e[0]), 1), int(e[1]) + 1)
    for e in data["heads"]:
        nouts[int(e[0])] = max(nouts.get(int(e[0]), 1), int(e[1]) + 1)
    nodes = [Node(id=i, name=str(n["name"]), op=str(n["op"]), attrs=dict(n.get("attrs") or n.get("param") or {}),
                  inputs=tuple(Entry(int(e[0]), int(e[1])) for e in n["inputs"]), num_outputs=nouts.get(i, 1))
             for i, n in enumerate(nodes_json)]
    return Graph(nodes=nodes, heads=[Entry(int(e[0]), int(e[1])) for e in data["heads"]])


_CHANNEL_FIRST = ("NCW", "NCHW", "NCDHW")
#: A validator's reason that depends on shapes or dtypes, which a placeholder partition does not know.
_NEEDS_SHAPES = re.compile(r"shape|rank|dimension|dims|size|dtype|float|int|batch|axis|elements|unknown|\d-D|\(\)", re.I)


def _attribute_reason(node: Node, entry: Any) -> Optional[str]:
    """The reason a converter refuses ``node`` on its attributes alone, or ``None``.

    Validators are asked with shapes unknown; a refusal that speaks of shapes or
    types (or a validator that needs them and raises) does not count: the bind,
    with shapes known, decides those.
    """
    layout = str(node.attrs.get("layout", "") or "")
    if layout not in ("", "None") and layout not in _CHANNEL_FIRST:
        return f"layout {layout} is not supported, only channel-first ones"
    n_in, n_out = len(node.inputs), max(1, node.num_outputs)
    spec = OpSpec(name=node.name, op=node.op, attrs=node.attrs, in_shapes=((),) * n_in, in_dtypes=("float32",) * n_in,
                  out_shapes=((),) * n_out, out_dtypes=("float32",) * n_out)
    for validate in entry.validators:
        try:
            reason = validate(spec)
        except ConversionError as exc:  # a validator that says why by raising
            reason = str(exc)
        except Exception:  # noqa: BLE001 - it needs the shapes: the bind will tell
            continue
        if reason and not _NEEDS_SHAPES.search(reason):
            return str(reason)
    return None


def _unsupported(graph: Graph, exclude: Set[str]) -> Dict[int, str]:
    out: Dict[int, str] = {}
    for nid in graph.op_nodes():
        node = graph.nodes[nid]
        if node.op in exclude:
            out[nid] = "excluded"
            continue
        if inference_identity(node):
            continue
        entry = registry.lookup(node.op, node.attrs)
        if node.op == "Custom" or entry is None:
            out[nid] = f"no converter for {node.op}"
            continue
        reason = _attribute_reason(node, entry)
        if reason:
            out[nid] = reason
    return out


def defer(sym: Any, options: Optional[Mapping[str, Any]] = None, params: Optional[Mapping[str, Any]] = None,
          native_reason: Optional[str] = None) -> Any:
    """A placeholder symbol for ``sym``: covered regions become placeholder nodes; the weights ride along.

    Args:
        sym: The user's symbol.
        options: Options for the bind (``optimize_for``'s); they are checked later, at the bind.
        params: Weights and aux states to bake in at the bind (``optimize_for``'s ``args``/``aux``).
        native_reason: The pass cannot run (why); the bind will be native with ``params`` loaded.

    Returns:
        A new symbol with the same arguments, aux states and outputs.
    """
    import mxnet as mx

    names = set(sym.list_arguments()) | set(sym.list_auxiliary_states())
    captured = Captured(params={k: v for k, v in (params or {}).items() if k in names},
                        options=dict(options or {}), native_reason=native_reason)
    token = _new_token(captured)
    data = splice.load(sym.tojson())
    graph = _ir(data)
    subgraphs = []
    if native_reason is None and not holds_fused_nodes(sym):
        exclude = set(call_settings(options).exclude_ops) if options else set()
        subgraphs = partition(graph, _unsupported(graph, exclude), MIN_REGION).subgraphs
    ensure_registered()
    if not subgraphs:  # nothing to show as a region: the symbol as it is, the token on its outputs' nodes
        for e in data["heads"]:
            node = data["nodes"][int(e[0])]
            node["attrs"] = {**(node.get("attrs") or {}), TOKEN_HIDDEN: token}
        return mx.sym.load_json(json.dumps(data))
    # The pass's own contraction: each region becomes one node (every variable stays an input).
    fres = fuse(graph, subgraphs, frozenset(), fused_op="Custom")
    extra: Dict[int, Dict[str, str]] = {}
    for fs in fres.fused:
        text = graph_to_json(subgraph_graph(graph, fs.subgraph.nodes, fs.inputs, fs.outputs))
        sub = mx.sym.load_json(text)
        args, aux = list(sub.list_arguments()), list(sub.list_auxiliary_states())
        inputs = [entry_name(graph, e) for e in fs.inputs]
        node = fres.graph.nodes[fs.node_id]
        node.inputs = tuple(node.inputs[inputs.index(n)] for n in args + aux)  # MXNet: arguments, then aux states
        node.attrs = {}
        extra[node.id] = {"op_type": PLACEHOLDER_OP, "mx_trt_subgraph": text, "mx_trt_args": json.dumps(args),
                          "mx_trt_aux": json.dumps(aux), "mx_trt_token": token}
    new = mx.sym.load_json(graph_to_json(fres.graph, extra))
    logger.info("TensorRT symbol: %d region(s) shown as placeholder nodes; engines are built at simple_bind "
                "(%d weight(s) kept)", len(fres.fused), len(captured.params))
    return new


def is_deferred(sym: Any) -> bool:
    """True when ``sym`` holds placeholder nodes or a token (it came from :func:`defer`).

    Read through the nodes' attributes, never ``tojson()``: MXNet keeps the
    nodes of a serialized symbol with custom operators alive, and those of an
    optimized symbol hold engines.
    """
    return bool(_any and tokens_in(sym))


def tokens_in(sym: Any) -> List[str]:
    """The tokens a symbol carries (placeholder nodes' and hidden ones), without repeats."""
    try:
        attrs = sym.attr_dict()
    except Exception:  # noqa: BLE001 - not a symbol MXNet can read: not ours
        return []
    found: List[str] = []
    for a in attrs.values():
        for t in (a.get("mx_trt_token") if a.get("op_type") == PLACEHOLDER_OP else None, a.get(TOKEN_HIDDEN)):
            if t and t not in found:
                found.append(t)
    return found


def _placeholder_of(node: Mapping[str, Any]) -> Optional[Tuple[str, Sequence[str]]]:
    attrs = node.get("attrs") or {}
    if node.get("op") != "Custom" or attrs.get("op_type") != PLACEHOLDER_OP:
        return None
    return attrs["mx_trt_subgraph"], json.loads(attrs["mx_trt_args"]) + json.loads(attrs["mx_trt_aux"])


def tokens_of(data: Mapping[str, Any]) -> List[str]:
    """The tokens a symbol JSON carries, in node order, without repeats."""
    found: List[str] = []
    for node in data["nodes"]:
        attrs = node.get("attrs") or {}
        for t in (attrs.get("mx_trt_token") if attrs.get("op_type") == PLACEHOLDER_OP else None,
                  attrs.get(TOKEN_HIDDEN)):
            if t and t not in found:
                found.append(t)
    return found


def expand_symbol(sym: Any) -> Tuple[Any, Captured]:
    """The symbol with every region back in place, and what its tokens carry (merged).

    Raises:
        MxTrtError: a placeholder node is damaged.
    """
    import mxnet as mx

    data = splice.load(sym.tojson())
    tokens = tokens_of(data)
    try:
        out = splice.expand(data, _placeholder_of)
    except (ValueError, KeyError) as exc:
        raise MxTrtError(f"the TensorRT symbol's placeholder nodes are damaged: {exc}") from None
    for node in out["nodes"]:
        attrs = node.get("attrs")
        if attrs and TOKEN_HIDDEN in attrs:
            node["attrs"] = {k: v for k, v in attrs.items() if k != TOKEN_HIDDEN}
    merged = Captured()
    with _lock:
        found = [_captured[t] for t in tokens if t in _captured]
    for cap in found:
        merged.params.update({k: v for k, v in cap.params.items() if k not in merged.params})
        merged.options.update({k: v for k, v in cap.options.items() if k not in merged.options})
        merged.native_reason = merged.native_reason or cap.native_reason
    if tokens and not found:
        logger.info("the TensorRT symbol's weights are not in this process (saved and loaded elsewhere?): "
                    "give them in shared_buffer or with copy_params_from")
    return mx.sym.load_json(json.dumps(out)), merged


def attach(sym: Any, arg_params: Mapping[str, Any], aux_params: Mapping[str, Any]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """``init_tensorrt_params``: keep the weights with a placeholder symbol; return those still needed outside.

    Every given weight is kept with the symbol (the bind decides which ones its
    engines take). The returned dicts hold the weights that operators outside
    the placeholder nodes use, as MXNet's ``init_tensorrt_params`` returned the
    weights outside its TensorRT nodes.
    """
    data = splice.load(sym.tojson())
    tokens = tokens_of(data)
    merged = {**dict(aux_params), **dict(arg_params)}
    with _lock:
        for t in tokens:
            cap = _captured.setdefault(t, Captured())
            cap.params.update(merged)
    inside: Set[int] = {i for i, n in enumerate(data["nodes"]) if _placeholder_of(n) is not None}
    outside_users: Set[str] = set()
    nodes = data["nodes"]
    for i, node in enumerate(nodes):
        if i in inside or node["op"] == "null":
            continue
        for e in node["inputs"]:
            src = nodes[int(e[0])]
            if src["op"] == "null":
                outside_users.add(src["name"])
    for e in data["heads"]:
        if nodes[int(e[0])]["op"] == "null":
            outside_users.add(nodes[int(e[0])]["name"])
    if not inside and not tokens:  # a plain symbol: MXNet kept everything outside
        return dict(arg_params), dict(aux_params)
    return ({k: v for k, v in arg_params.items() if k in outside_users},
            {k: v for k, v in aux_params.items() if k in outside_users})


# --------------------------------------------------------------------------- binding placeholder symbols


def deferred_simple_bind(sym: Any, ctx: Any, grad_req: Any = "write", type_dict: Any = None, stype_dict: Any = None,
                         group2ctx: Any = None, shared_arg_names: Any = None, shared_exec: Any = None,
                         shared_buffer: Any = None, **kwargs: Any) -> Any:
    """``simple_bind`` of a placeholder symbol: expand the regions, then bind with the pass (or natively).

    The weights kept with the symbol are the executor's: arguments and aux
    states are loaded from them (``shared_buffer`` entries win). Gradients
    asked for, or a pass that could not be prepared, give a native bind of the
    expanded graph with the same weights, after one warning.
    """
    full, captured = expand_symbol(sym)
    buffer = dict(captured.params)
    buffer.update(shared_buffer or {})
    original = hook.original_simple_bind()

    def native() -> Any:
        exe = original(full, ctx, grad_req=grad_req, type_dict=type_dict, stype_dict=stype_dict, group2ctx=group2ctx,
                       shared_arg_names=shared_arg_names, shared_exec=shared_exec, shared_buffer=buffer, **kwargs)
        load_weights(exe, buffer)
        return exe

    if captured.native_reason is not None:
        logger.warning("TensorRT symbol binds natively (%s)", captured.native_reason)
        return native()
    if any(r != "null" for r in grad_requests(grad_req)):
        logger.warning("TensorRT symbol bound with grad_req=%r: engines are inference-only, so it binds natively "
                       "(pass grad_req='null' to build its engines)", grad_req)
        return native()
    with hook.forced(), scoped_options(captured.options), weights_carried():
        return accelerated_simple_bind(full, ctx, grad_req=grad_req, type_dict=type_dict, stype_dict=stype_dict,
                                       group2ctx=group2ctx, shared_arg_names=shared_arg_names, shared_exec=shared_exec,
                                       shared_buffer=buffer, **kwargs)


# --------------------------------------------------------------------------- the placeholder operator


_registered = False
_register_lock = threading.Lock()
_warned_native = False


def ensure_registered() -> None:
    """Register the placeholder operator with MXNet (once): MXNet can then load, infer and even run it natively."""
    global _registered
    with _register_lock:
        if not _registered:
            _register()
            _registered = True


def _register() -> None:
    import mxnet as mx

    class _RegionOp(mx.operator.CustomOp):  # type: ignore[misc]
        """Runs a region natively (a placeholder symbol bound without the pass: slow, but right)."""

        def __init__(self, sub: Any, names: List[str], naux: int, ctx: Any) -> None:
            super().__init__()
            self._sub, self._names, self._naux, self._ctx = sub, names, naux, ctx

        def forward(self, is_train: bool, req: List[str], in_data: List[Any], out_data: List[Any], aux: List[Any]) -> None:
            global _warned_native
            if not _warned_native:
                _warned_native = True
                logger.warning("a TensorRT symbol's placeholder runs natively: bind it with simple_bind(..., "
                               "grad_req='null') to build its engines")
            nargs = len(self._names) - self._naux
            exe = self._sub.bind(self._ctx, args=dict(zip(self._names[:nargs], in_data)),
                                 aux_states=dict(zip(self._names[nargs:], aux)), grad_req="null")
            for k, out in enumerate(exe.forward(is_train=False)):
                self.assign(out_data[k], req[k], out)

        def backward(self, req: Any, out_grad: Any, in_data: Any, out_data: Any, in_grad: Any, aux: Any) -> None:
            raise MxTrtError("a TensorRT symbol's placeholder has no backward (engines are inference-only)")

    @mx.operator.register(PLACEHOLDER_OP)  # type: ignore[misc]
    class _RegionProp(mx.operator.CustomOpProp):  # type: ignore[misc]
        def __init__(self, mx_trt_subgraph: str, mx_trt_args: str, mx_trt_aux: str, mx_trt_token: str = "") -> None:
            super().__init__(need_top_grad=False)
            self._sub = mx.sym.load_json(mx_trt_subgraph)
            self._args, self._aux = json.loads(mx_trt_args), json.loads(mx_trt_aux)

        def list_arguments(self) -> List[str]:
            return list(self._args)

        def list_auxiliary_states(self) -> List[str]:
            return list(self._aux)

        def list_outputs(self) -> List[str]:
            return [f"output{i}" for i in range(len(self._sub.list_outputs()))]

        def infer_shape(self, in_shape: List[Any]) -> Tuple[List[Any], List[Any], List[Any]]:
            known = {n: tuple(s) for n, s in zip(self._args, in_shape) if s and all(int(d) > 0 for d in s)}
            a, o, x = self._sub.infer_shape_partial(**known)
            fix = lambda shapes: [list(s) if s is not None else [] for s in shapes]  # noqa: E731
            return fix(a), fix(o), fix(x)

        def infer_type(self, in_type: List[Any]) -> Tuple[List[Any], List[Any], List[Any]]:
            known = {n: t for n, t in zip(self._args, in_type) if t is not None}
            a, o, x = self._sub.infer_type_partial(**known)
            first = next((t for t in in_type if t is not None), None)
            fix = lambda types: [t if t is not None else first for t in types]  # noqa: E731
            return fix(a), fix(o), fix(x)

        def create_operator(self, ctx: Any, shapes: Any, dtypes: Any) -> Any:
            return _RegionOp(self._sub, self._args + self._aux, len(self._aux), ctx)
