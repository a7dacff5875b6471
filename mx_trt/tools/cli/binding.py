"""Binding a checkpoint natively or with the pass, running it, and its whole-model engine."""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np

from mx_trt.builder.backends import Buffer
from mx_trt.frontends.hook import disabled, original_simple_bind
from mx_trt.pipeline.bind import bind
from mx_trt.pipeline.request import BindRequest
from mx_trt.tools.cli.checkpoint import Checkpoint
from mx_trt.tools.cli.options import Shape


def bind_native(ckpt: Checkpoint, shapes: Mapping[str, Shape], ctx: Any) -> Any:
    """MXNet's own bind, whatever ``MXNET_USE_TENSORRT`` says."""
    with disabled():
        exe = ckpt.symbol.simple_bind(ctx, grad_req="null", shared_buffer=ckpt.params, **shapes)
    exe.copy_params_from(ckpt.arg_params, ckpt.aux_params, allow_extra_params=True)
    return exe


def bind_accelerated(ckpt: Checkpoint, shapes: Mapping[str, Shape], ctx: Any, settings: Any, backend: Any) -> Tuple[Any, Any]:
    """The pass's bind: ``(executor, BindInfo)``."""
    return bind(BindRequest(symbol=ckpt.symbol, shapes=shapes, params=dict(ckpt.params), settings=settings, backend=backend,
                            ctx=ctx, native_bind=original_simple_bind()))


def run_executor(exe: Any, inputs: Mapping[str, np.ndarray]) -> List[np.ndarray]:
    """Copy ``inputs`` in, run one inference forward, return the outputs."""
    for k, v in inputs.items():
        exe.arg_dict[k][:] = v
    exe.forward(is_train=False)
    return [o.asnumpy() for o in exe.outputs]


class WholeModelEngine:
    """The engine of an executor whose single subgraph holds every operator, run without MXNet.

    The reference for the cost of the fused node: the same engine, called
    directly on numpy buffers.
    """

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.inputs = {t.name: np.zeros(t.shape, dtype=t.dtype) for t in engine.inputs}
        self.outputs = [np.zeros(t.shape, dtype=t.dtype) for t in engine.outputs]
        self._in = [Buffer(self.inputs[t.name].ctypes.data, tuple(t.shape), t.dtype) for t in engine.inputs]
        self._out = [Buffer(a.ctypes.data, tuple(a.shape), a.dtype.name) for a in self.outputs]

    @classmethod
    def from_bind(cls, info: Any) -> Optional["WholeModelEngine"]:
        """The whole-model engine of a bind, or ``None`` unless every operator is in one engine."""
        inside, total = info.plan.op_counts()
        if len(info.engines) != 1 or info.native_failures or inside != total:
            return None
        return cls(info.engines[0].engine)

    def set_inputs(self, inputs: Mapping[str, np.ndarray]) -> None:
        for name, buf in self.inputs.items():
            buf[...] = inputs[name]

    def run(self) -> None:
        self.engine.run(self._in, self._out)


def whole_model_note(info: Any) -> str:
    """Why the whole model is not one engine (for reports)."""
    inside, total = info.plan.op_counts()
    if inside != total:
        return f"{total - inside} of {total} operators stay native"
    kept = [k for k, d in getattr(info, "decisions", {}).items() if d.engine is None]
    if kept:
        return f"the measured engine rule kept {len(kept)} subgraph(s) native ({kept[0]}: {info.decisions[kept[0]].text})"
    if info.native_failures:
        return "an engine failed to build"
    return f"{len(info.engines)} engines"


def decision_json(d: Any) -> Dict[str, Any]:
    """A measured-rule decision (:class:`~mx_trt.pipeline.measure.Decision`) for JSON output."""
    return {"engine": list(d.engine) if d.engine else None, "native_ms": d.native_ms, "engine_ms": dict(d.engine_ms),
            "how": d.how, "text": d.text, "stored": d.stored, "measure_s": d.seconds}


def decisions_text(decisions: Mapping[str, Any]) -> str:
    """The measured rule's decisions, one line per subgraph (empty under the other rules)."""
    if not decisions:
        return ""
    lines = ["engine rule: measured (each engine timed against MXNet running its subgraph, at bind)"]
    for name, d in decisions.items():
        lines.append(f"  {name}: {d.text}" + (" (stored decision)" if d.stored else ""))
    return "\n".join(lines) + "\n"
