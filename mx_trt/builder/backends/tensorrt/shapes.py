"""Shapes and optimization profiles of TensorRT engines (no TensorRT import).

A profile gives each input a ``(min_shape, opt_shape, max_shape)`` range. The
builder completes and checks the given ones (:func:`make_profiles`, or
:func:`profiles_from_batch_ranges` for a batch-only range), a run picks the
first that contains its input shapes (:func:`select_profile`), and output
shapes come either from the batch rule (:func:`batch_rule_output_shapes`) or
from an execution context (:func:`context_output_shapes`).
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from mx_trt.errors import EngineBuildError, ShapeError
from mx_trt.builder.backends.base import Shape, TensorSpec

#: ``(min_shape, opt_shape, max_shape)`` per input name.
Profile = Dict[str, Tuple[Shape, Shape, Shape]]


def dims_tuple(dims: Any) -> Optional[Shape]:
    """A TensorRT ``Dims`` as a tuple, or ``None`` when it has no valid rank (``nbDims == -1``).

    ``len()`` comes first: iterating a ``Dims`` whose ``nbDims`` is -1 yields an
    empty tuple, which would look like a scalar.
    """
    try:
        n = len(dims)
    except (ValueError, TypeError, OverflowError):
        return None
    if n < 0:
        return None
    return tuple(int(dims[i]) for i in range(n))


def fmt_shape(shape: Sequence[int]) -> str:
    """``(?, 3, 8, 8)``: a shape for messages, ``?`` for a dynamic dimension."""
    return "(" + ", ".join("?" if d < 0 else str(d) for d in shape) + ")"


def shape_triple(raw: Any, where: str) -> Tuple[Shape, Shape, Shape]:
    """``(min_shape, opt_shape, max_shape)`` as tuples of ints.

    Raises:
        EngineBuildError: ``raw`` is not three shapes (``where`` says whose).
    """
    try:
        lo, opt, hi = (tuple(int(d) for d in s) for s in raw)
    except (TypeError, ValueError):
        raise EngineBuildError(f"{where}: expected (min_shape, opt_shape, max_shape), got {raw!r}") from None
    return lo, opt, hi


def profiles_from_batch_ranges(dims: Mapping[str, Shape], ranges: Sequence[Sequence[int]], subgraph: str) -> List[Profile]:
    """Profiles over dimension 0 from ``[(min, opt, max)]``: every input whose dimension 0 is dynamic takes it.

    Raises:
        EngineBuildError: a range is malformed, or an input has other dynamic dimensions.
    """
    out: List[Profile] = []
    for r in ranges:
        try:
            lo, opt, hi = (int(v) for v in r)
        except (TypeError, ValueError):
            raise EngineBuildError(f"{subgraph}: batch range {r!r} is not (min, opt, max)") from None
        prof: Profile = {}
        for name, d in dims.items():
            if not d or d[0] >= 0:
                continue
            if any(x < 0 for x in d[1:]):
                raise EngineBuildError(f"{subgraph}: input {name!r} {fmt_shape(d)} has dynamic dimensions besides the batch: "
                                       "give BuildOptions.extra['profiles'] with full shapes")
            rest = tuple(d[1:])
            prof[name] = ((lo,) + rest, (opt,) + rest, (hi,) + rest)
        out.append(prof)
    return out


def make_profiles(
    dims: Mapping[str, Shape],
    given: Optional[Sequence[Mapping[str, Any]]],
    subgraph: str,
    dim_names: Optional[Mapping[str, Sequence[Optional[str]]]] = None,
) -> List[Profile]:
    """Complete and check optimization profiles for a network's inputs.

    Args:
        dims: Input name -> network dimensions (-1 for a dynamic one), in input order.
        given: ``[{input: (min, opt, max)}]`` or ``None``.
        subgraph: For messages.
        dim_names: Input name -> ONNX ``dim_param`` per axis, for messages.

    Returns:
        One profile per given one (or a single static profile), covering every input:
        static inputs get ``min = opt = max`` = their shape. An input a profile
        leaves out whose only dynamic dimension is 0 takes dimension 0's range
        from the profile's other inputs when they agree on it.

    Raises:
        EngineBuildError: dynamic inputs without profiles, unknown inputs, wrong
            ranks, ``min <= opt <= max`` violated, or a static dimension changed.
    """
    names = dim_names or {}

    def describe(name: str) -> str:
        d = dims[name]
        labels = names.get(name) or [None] * len(d)
        dyn = [f"axis {i}" + (f" ({labels[i]!r})" if i < len(labels) and labels[i] else "") for i, x in enumerate(d) if x < 0]
        return f"input {name!r} {fmt_shape(d)} has dynamic {', '.join(dyn)}"

    dynamic = [n for n, d in dims.items() if any(x < 0 for x in d)]
    if not given:
        if dynamic:
            raise EngineBuildError(
                f"{subgraph}: {'; '.join(describe(n) for n in dynamic)} and no optimization profile was given: "
                "pass BuildOptions.extra['profiles'] = [{input: (min_shape, opt_shape, max_shape)}] "
                "(or extra['batch_ranges'] = [(min, opt, max)])"
            )
        return [{n: (tuple(d), tuple(d), tuple(d)) for n, d in dims.items()}]

    out: List[Profile] = []
    for k, raw in enumerate(given):
        where = f"{subgraph}: optimization profile {k}"
        unknown = sorted(set(raw) - set(dims))
        if unknown:
            raise EngineBuildError(f"{where} names {unknown}, which are not inputs of the network (inputs: {list(dims)})")
        prof: Profile = {n: shape_triple(v, f"{where}, input {n!r}") for n, v in raw.items()}
        batch0 = {(t[0][0], t[1][0], t[2][0]) for n, t in prof.items() if t[0] and dims[n] and dims[n][0] < 0}
        for n, d in dims.items():
            if n in prof:
                continue
            if not any(x < 0 for x in d):
                prof[n] = (tuple(d), tuple(d), tuple(d))
            elif d and d[0] < 0 and all(x >= 0 for x in d[1:]) and len(batch0) == 1:
                lo, opt, hi = next(iter(batch0))
                rest = tuple(d[1:])
                prof[n] = ((lo,) + rest, (opt,) + rest, (hi,) + rest)
            else:
                raise EngineBuildError(f"{where} does not cover {describe(n)}")
        for n, (s_min, s_opt, s_max) in prof.items():
            d = dims[n]
            if not (len(s_min) == len(s_opt) == len(s_max) == len(d)):
                raise EngineBuildError(f"{where}, input {n!r}: shapes {s_min}, {s_opt}, {s_max} must have rank {len(d)} like {fmt_shape(d)}")
            for i, want in enumerate(d):
                if not 0 <= s_min[i] <= s_opt[i] <= s_max[i]:
                    raise EngineBuildError(f"{where}, input {n!r} axis {i}: need 0 <= min <= opt <= max, "
                                           f"got {s_min[i]}, {s_opt[i]}, {s_max[i]}")
                if want >= 0 and not s_min[i] == s_opt[i] == s_max[i] == want:
                    raise EngineBuildError(f"{where}, input {n!r} axis {i} is static ({want}) in the network, "
                                           f"the profile asks for {s_min[i]}..{s_max[i]}")
        out.append({n: prof[n] for n in dims})
    return out


def select_profile(profiles: Sequence[Profile], names: Sequence[str], shapes: Sequence[Shape], subgraph: str) -> int:
    """Index of the first profile whose ranges contain every input shape.

    Raises:
        ShapeError: no profile does.
    """
    got = [tuple(int(d) for d in s) for s in shapes]
    for k, prof in enumerate(profiles):
        ok = True
        for n, s in zip(names, got):
            lo, _, hi = prof[n]
            if len(s) != len(lo) or any(not a <= x <= b for a, x, b in zip(lo, s, hi)):
                ok = False
                break
        if ok:
            return k
    ranges = "; ".join(
        f"profile {k}: " + ", ".join(f"{n} {prof[n][0]}..{prof[n][2]}" for n in names) for k, prof in enumerate(profiles)
    )
    raise ShapeError(f"{subgraph}: input shapes {dict(zip(names, got))} are outside every optimization profile ({ranges}); "
                     "bind again with a profile that covers them")


def batch_rule_output_shapes(inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec], shapes: Sequence[Shape],
                             subgraph: str) -> List[Shape]:
    """Output shapes under the batch rule: dimension 0 of every output follows the inputs' common batch.

    Raises:
        ShapeError: the inputs disagree on dimension 0 or differ from the bound shapes elsewhere.
    """
    got = [tuple(int(d) for d in s) for s in shapes]
    batches = {s[0] for s in got if s}
    if len(batches) != 1:
        raise ShapeError(f"{subgraph}: inputs disagree on the batch size (dimension 0): {got}")
    for spec, s in zip(inputs, got):
        if len(s) != len(spec.shape) or s[1:] != spec.shape[1:]:
            raise ShapeError(f"{subgraph}: input {spec.name!r} must keep dimensions {spec.shape[1:]} after the batch, got {s}")
    b = batches.pop()
    return [(b,) + tuple(o.shape[1:]) for o in outputs]


def context_output_shapes(context: Any, in_names: Sequence[str], shapes: Sequence[Shape], out_names: Sequence[str],
                          subgraph: str) -> List[Shape]:
    """Set the input shapes on an execution context and read back the output shapes.

    Raises:
        ShapeError: an input shape is rejected, or an output's shape cannot be
            computed (``nbDims == -1``, or a -1 dimension: data-dependent).
    """
    for n, s in zip(in_names, shapes):
        if not context.set_input_shape(n, tuple(int(d) for d in s)):
            raise ShapeError(f"{subgraph}: TensorRT rejected shape {tuple(s)} for input {n!r} "
                             "(outside the active optimization profile, or inconsistent with the network)")
    out: List[Shape] = []
    for n in out_names:
        d = dims_tuple(context.get_tensor_shape(n))
        if d is None:
            raise ShapeError(f"{subgraph}: TensorRT cannot compute the shape of output {n!r} for input shapes "
                             f"{dict(zip(in_names, (tuple(s) for s in shapes)))} (nbDims == -1: the input shapes are "
                             "inconsistent with each other or with the network)")
        if any(x < 0 for x in d):
            raise ShapeError(f"{subgraph}: output {n!r} has shape {fmt_shape(d)}, which depends on the data; "
                             "mx_trt needs output shapes that follow from the input shapes")
        out.append(d)
    return out
