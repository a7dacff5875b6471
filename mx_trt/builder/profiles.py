"""Optimization profiles: the batch ranges a bind asks for.

Only dimension 0, the batch, may vary. Profiles come from
``MXNET_TENSORRT_MAX_BATCH_SIZE=N`` (one profile: min 1, opt the bound batch,
max N) or from explicit profiles (:func:`mx_trt.set_optimization_profiles` /
``MXNET_TENSORRT_PROFILES``). Whether a subgraph can use them is decided on
export (:mod:`mx_trt.export.dynamic`).
"""
from __future__ import annotations

from typing import List, Mapping, Optional, Tuple

from mx_trt.errors import ShapeError
from mx_trt.passes.ir import BatchRange
from mx_trt.settings import Settings


def batch_ranges(settings: Settings, shapes: Mapping[str, Tuple[int, ...]]) -> List[BatchRange]:
    """The batch profiles a bind asks for; empty for static engines.

    Args:
        settings: The bind's settings.
        shapes: The data input shapes given to ``simple_bind``.

    Raises:
        ShapeError: a profile varies more than the batch, disagrees between inputs,
            does not contain the bound batch, or MAX_BATCH_SIZE is below it.
    """
    if not settings.profiles and not settings.max_batch_size:
        return []
    if not shapes:
        raise ShapeError("dynamic batch needs the data input shapes given to simple_bind")
    batches = {s[0] for s in shapes.values() if s}
    if len(batches) != 1:
        raise ShapeError(f"dynamic batch needs every data input to share dimension 0, got {dict(shapes)}")
    bound = batches.pop()
    if settings.profiles:
        out: List[BatchRange] = []
        for k, prof in enumerate(settings.profiles):
            triple: Optional[BatchRange] = None
            for name, (mn, opt, mx) in prof.items():
                if name not in shapes:
                    raise ShapeError(f"profile {k} names {name!r}, which is not a data input ({sorted(shapes)})")
                want = tuple(shapes[name])
                for s in (mn, opt, mx):
                    if len(s) != len(want) or tuple(s[1:]) != want[1:]:
                        raise ShapeError(f"profile {k}, input {name!r}: only the batch dimension may vary: "
                                         f"{tuple(s)} against the bound {want}")
                t = (int(mn[0]), int(opt[0]), int(mx[0]))
                if not 1 <= t[0] <= t[1] <= t[2]:
                    raise ShapeError(f"profile {k}, input {name!r}: batch needs 1 <= min <= opt <= max, got {t}")
                if triple is not None and triple != t:
                    raise ShapeError(f"profile {k}: inputs disagree on the batch range ({triple} and {t})")
                triple = t
            assert triple is not None
            out.append(triple)
        if not any(lo <= bound <= hi for lo, _, hi in out):
            raise ShapeError(f"the bound batch {bound} is in none of the profiles {out}")
        return out
    n = int(settings.max_batch_size or 0)
    if n < bound:
        raise ShapeError(f"MXNET_TENSORRT_MAX_BATCH_SIZE={n} is below the bound batch {bound}")
    return [(1, bound, n)]
