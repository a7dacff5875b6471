"""The JSON description stored with a TensorRT plan, and its checks when a stored plan is loaded.

``TrtEngine.meta()`` holds: ``format``, ``backend``, ``module``, ``version``,
``name``, ``device_id``, ``inputs`` / ``outputs`` (``name``, bound ``shape``,
``dtype``, network ``dims`` with -1 for dynamic), ``profiles``
(``[{input: [min, opt, max]}]``), ``batch_ranges``, ``output_shape_rule``,
``strongly_typed``, ``rtx_specialization``, ``plan_bytes`` and ``plan_sha256``;
the builder adds ``stripped`` (the plan holds no weights: loading it needs
``BuildOptions.extra["weights"]``), ``unstripped_reason`` (why a plan keeps its
weights), ``onnx_weight_bytes`` (the exported initializers), and after a refit
``refit_weights`` (the names set) with ``stripped_weights_bytes`` /
``total_weights_bytes`` where ``EngineStat`` gives them. A description without
``stripped`` is a plan with its weights.

Output shape rules: ``static`` (no dynamic input), ``batch`` (dimension 0 of
every input and output is one shared batch; outputs follow it) or ``engine``
(a deserialized engine computes them).
"""
from __future__ import annotations

import hashlib
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set

from mx_trt.errors import EngineBuildError
from mx_trt.builder.backends.base import BuildOptions, Shape
from mx_trt.builder.backends.tensorrt.flavours import TrtBackendInfo
from mx_trt.builder.backends.tensorrt.shapes import Profile, shape_triple

META_FORMAT = 1
OUTPUT_SHAPE_RULES = ("batch", "static", "engine")


def onnx_dims(value_info: Any) -> List[Any]:
    """Per axis of an ONNX ``ValueInfoProto``: an int, a ``dim_param`` string, or ``None`` (unknown)."""
    out: List[Any] = []
    for d in value_info.type.tensor_type.shape.dim:
        if d.HasField("dim_value"):
            out.append(int(d.dim_value))
        elif d.HasField("dim_param"):
            out.append(str(d.dim_param))
        else:
            out.append(None)
    return out


def onnx_dtype(value_info: Any) -> str:
    """The numpy dtype name of an ONNX ``ValueInfoProto``'s element type."""
    import numpy as np
    from onnx import helper

    return np.dtype(helper.tensor_dtype_to_np_dtype(value_info.type.tensor_type.elem_type)).name


def module_version(backend: TrtBackendInfo) -> str:
    """``__version__`` of the backend's module (``?`` if it has none)."""
    return str(getattr(backend.module(), "__version__", "?"))


def describe_engine(backend: TrtBackendInfo, exported: Any, options: BuildOptions, in_dims: Mapping[str, Shape],
                    profiles: Sequence[Profile], plan: bytes, strongly_typed: bool,
                    specialization: Optional[str]) -> Dict[str, Any]:
    """The JSON description of a freshly built engine (see the module docstring).

    Bound shapes come from the export (``input_specs`` / ``output_specs``), else
    from the first profile's opt shapes and the declared output dimensions.
    O(inputs + outputs + profiles).

    Raises:
        EngineBuildError: ``extra['output_shape_rule']`` is unknown, or ``batch``
            where the model does not follow it.
    """
    model = exported.model
    onnx_in = {vi.name: vi for vi in model.graph.input}
    onnx_out = {vi.name: vi for vi in model.graph.output}
    bound_in = {n: s for n, s, _ in getattr(exported, "input_specs", None) or []}
    bound_out = {n: s for n, s, _ in getattr(exported, "output_specs", None) or []}
    inputs = []
    for n in exported.input_names:
        shape = tuple(bound_in.get(n) or profiles[0][n][1])
        inputs.append({"name": n, "shape": list(shape), "dtype": onnx_dtype(onnx_in[n]), "dims": list(in_dims[n])})
    batch_names = {d[0] for d in (onnx_dims(onnx_in[n]) for n in exported.input_names) if d and isinstance(d[0], str)}
    batch_name = getattr(exported, "batch_dim", None) or (next(iter(batch_names)) if len(batch_names) == 1 else None)
    bound_batch = {s["shape"][0] for s in inputs if s["shape"]}
    outputs = []
    out_dims = []
    for n in exported.output_names:
        dims = onnx_dims(onnx_out[n])
        out_dims.append(dims)
        if n in bound_out:
            shape = tuple(bound_out[n])
        elif all(isinstance(x, int) for x in dims):
            shape = tuple(dims)
        elif dims and dims[0] == batch_name and all(isinstance(x, int) for x in dims[1:]) and len(bound_batch) == 1:
            shape = (next(iter(bound_batch)),) + tuple(dims[1:])
        else:
            shape = tuple(x if isinstance(x, int) else -1 for x in dims)
        outputs.append({"name": n, "shape": list(shape), "dtype": onnx_dtype(onnx_out[n]),
                        "dims": [x if isinstance(x, int) else -1 for x in dims]})

    follows = _follows_batch_rule(in_dims, profiles, out_dims, [o["shape"] for o in outputs], batch_name, bound_batch)
    rule = _output_shape_rule(options, in_dims, follows)
    batch_ranges = []
    if rule == "batch":
        for prof in profiles:
            lo, opt, hi = next(iter(prof.values()))
            batch_ranges.append([lo[0], opt[0], hi[0]])
    return {
        "format": META_FORMAT,
        "backend": backend.name,
        "module": backend.module_name,
        "version": module_version(backend),
        "name": options.name,
        "device_id": int(options.device_id),
        "inputs": inputs,
        "outputs": outputs,
        "profiles": [{n: [list(lo), list(opt), list(hi)] for n, (lo, opt, hi) in p.items()} for p in profiles],
        "batch_ranges": batch_ranges,
        "output_shape_rule": rule,
        "strongly_typed": strongly_typed,
        "rtx_specialization": specialization,
        "plan_bytes": len(plan),
        "plan_sha256": hashlib.sha256(plan).hexdigest(),
    }


def _follows_batch_rule(in_dims: Mapping[str, Shape], profiles: Sequence[Profile], out_dims: Sequence[Sequence[Any]],
                        out_shapes: Sequence[Sequence[int]], batch_name: Optional[str], bound_batch: Set[int]) -> bool:
    """Whether dimension 0 is one shared batch: the only dynamic input axis, named alike on every output,
    bound alike, and given one range per profile."""
    if not batch_name or len(bound_batch) != 1:
        return False
    b = next(iter(bound_batch))
    for d in in_dims.values():
        if not d or d[0] >= 0 or any(x < 0 for x in d[1:]):
            return False
    for dims, shape in zip(out_dims, out_shapes):
        if not dims or dims[0] != batch_name or not all(isinstance(x, int) for x in dims[1:]) or shape[0] != b:
            return False
    ranges = {tuple((t[0][0], t[1][0], t[2][0]) for t in prof.values()) for prof in profiles}
    return all(len(set(r)) == 1 for r in ranges)


def _output_shape_rule(options: BuildOptions, in_dims: Mapping[str, Shape], follows_batch_rule: bool) -> str:
    """``static`` without dynamic inputs, else the one asked for (checked), else ``batch`` when it holds."""
    rule = options.extra.get("output_shape_rule")
    if rule is not None and rule not in OUTPUT_SHAPE_RULES:
        raise EngineBuildError(f"{options.name}: output_shape_rule={rule!r}: expected one of {OUTPUT_SHAPE_RULES}")
    if not any(any(x < 0 for x in d) for d in in_dims.values()):
        return "static"
    if rule is None:
        return "batch" if follows_batch_rule else "engine"
    if rule == "batch" and not follows_batch_rule:
        raise EngineBuildError(f"{options.name}: output_shape_rule='batch' but the exported model does not keep "
                               "dimension 0 as a shared batch on every input and output")
    return str(rule)


def check_stored(backend: TrtBackendInfo, plan: bytes, meta: Mapping[str, Any]) -> None:
    """Refuse a stored plan another backend, module version or metadata format wrote, or that is damaged.

    O(len(plan)) for the digest.

    Raises:
        EngineBuildError: what does not match.
    """
    if int(meta.get("format", -1)) != META_FORMAT:
        raise EngineBuildError(f"stored engine metadata format {meta.get('format')!r} is not {META_FORMAT}")
    if meta.get("backend") != backend.name:
        raise EngineBuildError(f"stored engine is for backend {meta.get('backend')!r}, not {backend.name!r}")
    version = module_version(backend)
    if meta.get("version") != version:
        raise EngineBuildError(f"stored engine was built by {backend.label} {meta.get('version')}, this is {version}")
    digest = meta.get("plan_sha256")
    if digest and hashlib.sha256(bytes(plan)).hexdigest() != digest:
        raise EngineBuildError(f"stored engine {meta.get('name')!r}: the plan does not match its recorded sha256")


def profiles_from_meta(raw: Sequence[Mapping[str, Any]]) -> List[Profile]:
    """``profiles`` of the description with tuple shapes."""
    return [{str(n): shape_triple(t, "meta profiles") for n, t in p.items()} for p in raw]
