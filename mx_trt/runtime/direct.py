"""A whole model in one engine, run on the calling thread instead of through MXNet's engine.

When the optimized symbol is a single fused node fed by the graph's own
variables, an inference forward through MXNet's executor does nothing but queue
that node on MXNet's engine, hand it to the custom-operator worker thread, call
back into Python, and wait for it. :class:`DirectForward` does the same work on
the caller's thread: it writes the keyword inputs as MXNet's ``Executor.forward``
does, waits for the writes still queued on the input arrays and for the reads
still queued on the output arrays, and runs the engine over those arrays'
memory (zero copy). Measured on the 2-core machine with OpenVINO at two threads:
MobileNetV2 at batch 1 2.03 ms through the executor against 1.75 ms direct,
SqueezeNet 1.1 1.81 against 1.61 ms.

The executor's arrays, its ``outputs`` and the fused node's ``run_count`` are
the same either way; the native twin of the run-time check reads the same
input arrays. Training forwards, executors with a monitor callback, GPU
contexts, and graphs with more than the one node keep MXNet's path.
"""
from __future__ import annotations

import logging
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from mx_trt.builder.backends.base import Engine
from mx_trt.errors import ShapeError
from mx_trt.runtime.fused_op import ENGINE_ATTR, OP_TYPE, FusedEngine, Layout, run_on_host

logger = logging.getLogger(__name__)


def write_inputs(exe: Any, kwargs: Mapping[str, Any]) -> None:
    """Write ``kwargs`` into ``exe``'s argument arrays as MXNet 1.9.1's ``Executor.forward`` checks and writes them.

    Raises:
        ValueError: a value is neither an NDArray nor a numpy array, or its shape differs.
        TypeError: the executor has no argument of that name.
    """
    if not kwargs:
        return
    import mxnet as mx

    args = exe.arg_dict
    for name, array in kwargs.items():
        if not isinstance(array, (mx.nd.NDArray, np.ndarray)):
            raise ValueError("only accept keyword argument of NDArrays and numpy.ndarray")
        if name not in args:
            raise TypeError(f"Unknown argument {name}")
        if args[name].shape != array.shape:
            raise ValueError(f"Shape not match! Argument {name}, need: {args[name].shape}, received: {array.shape}")
        dst = args[name]
        if type(array) is type(dst) and array.dtype == dst.dtype and array.context == dst.context:
            if array.handle is not dst.handle:
                array.copyto(dst)  # what ``dst[:] = array`` queues here, without its 40 us of indexing in Python
        else:
            dst[:] = array  # numpy (a synchronous copy), or a cast or a move on the way


def wait_to_write(arr: Any) -> None:
    """Wait until MXNet has finished every queued read and write of ``arr`` (MXNDArrayWaitToWrite)."""
    from mxnet.base import _LIB, check_call

    check_call(_LIB.MXNDArrayWaitToWrite(arr.handle))


class DirectForward:
    """The inference forward of one executor whose symbol is one fused node (see the module's docstring).

    Made by :meth:`plan`, which returns ``None`` for any other executor. Cost per
    forward: the keyword writes, one wait per input and output array, and the
    engine's run; no MXNet operator is queued.
    """

    def __init__(self, fused: FusedEngine, engine: Engine, inputs: List[Tuple[str, str]], heads: List[int],
                 layout: Layout) -> None:
        self.fused = fused
        self.engine = engine
        #: (``arg``/``aux``, name) of each of the node's inputs, in its order.
        self.inputs = inputs
        #: For each of the node's outputs, its index in the executor's ``outputs``.
        self.heads = heads
        self.layout = layout
        self.scratch: Dict[int, Any] = {}

    @classmethod
    def plan(cls, exe: Any, engines: Sequence[FusedEngine]) -> Optional["DirectForward"]:
        """The direct forward of ``exe``, or ``None``: its symbol is not one fused node fed by variables, or it is on a GPU.

        Reads the symbol's nodes once (not its JSON, which would keep custom
        operators alive: see :func:`~mx_trt.runtime.fused_op.fused_engine_keys`).
        O(nodes of the symbol).
        """
        symbol = getattr(exe, "_symbol", None)
        if symbol is None or len(engines) != 1:
            return None
        fused = engines[0]
        try:
            if any(a.context.device_type != "cpu" for a in list(exe.arg_arrays) + list(exe.outputs)):
                return None
            node = [n for n, a in symbol.attr_dict().items()
                    if a.get("op_type") == OP_TYPE and a.get(ENGINE_ATTR) == fused.key]
            if len(node) != 1:
                return None
            outs = [f"{node[0]}_{o}" for o in fused.output_names]
            args, aux = list(symbol.list_arguments()), list(symbol.list_auxiliary_states())
            variables = set(args) | set(aux)
            internals = symbol.get_internals()
            if sorted(n for n in internals.list_outputs() if n not in variables) != sorted(outs):
                return None  # another operator runs in MXNet
            heads = list(symbol.list_outputs())
            if sorted(heads) != sorted(outs) or len(set(heads)) != len(heads):
                return None  # an output of the node is not the executor's, or one is twice
            children = internals[outs[0]].get_children()
            feeds = list(children.list_outputs()) if children is not None else []
            if len(feeds) != len(fused.input_names) or any(f not in variables for f in feeds):
                return None
            inputs = [("arg" if f in args else "aux", f) for f in feeds]
            arrays = [exe.arg_dict[n] if kind == "arg" else exe.aux_dict[n] for kind, n in inputs]
            shapes = [tuple(int(d) for d in a.shape) for a in arrays]
            engine = fused.engine_for(shapes)
            out_shapes = engine.output_shapes(shapes)
            layout: Layout = ([(s, t.dtype) for s, t in zip(shapes, engine.inputs)],
                              [(tuple(s), t.dtype) for s, t in zip(out_shapes, engine.outputs)])
            order = [heads.index(o) for o in outs]
            got = [(tuple(int(d) for d in exe.outputs[j].shape), np.dtype(exe.outputs[j].dtype).name) for j in order]
            want = [(s, np.dtype(dt).name) for s, dt in layout[1]]
            have_in = [np.dtype(a.dtype).name for a in arrays]
            if got != want or have_in != [np.dtype(dt).name for _, dt in layout[0]]:
                logger.debug("%s: executor arrays %s / %s differ from the engine's %s: MXNet runs the node",
                             fused.name, have_in, got, layout)
                return None
        except Exception as exc:  # noqa: BLE001 - any doubt keeps MXNet's own path, which always works
            logger.debug("%s: no direct forward (%s: %s)", fused.name, type(exc).__name__, exc)
            return None
        return cls(fused, engine, inputs, order, layout)

    def with_engine(self, engine: Engine, name: str) -> "DirectForward":
        """The same forward of the same executor by ``engine``, another engine of the node's subgraph (a
        fused engine of its own, ``name``, counts its runs).

        Raises:
            ShapeError: ``engine`` does not take the executor's input shapes and types, or gives other outputs.
        """
        shapes = [s for s, _ in self.layout[0]]
        try:
            out_shapes = engine.output_shapes(shapes)
        except ShapeError as exc:
            raise ShapeError(f"{name}: the engine does not take the executor's inputs: {exc}") from exc
        layout: Layout = ([(s, t.dtype) for s, t in zip(shapes, engine.inputs)],
                          [(tuple(s), t.dtype) for s, t in zip(out_shapes, engine.outputs)])

        def named(side: Sequence[Tuple[Tuple[int, ...], Any]]) -> List[Tuple[Tuple[int, ...], str]]:
            return [(tuple(s), np.dtype(dt).name) for s, dt in side]

        if len(engine.inputs) != len(self.layout[0]) or named(layout[0]) != named(self.layout[0]) \
                or named(layout[1]) != named(self.layout[1]):
            raise ShapeError(f"{name}: the engine takes {named(layout[0])} and gives {named(layout[1])}, where the "
                             f"executor's engine takes {named(self.layout[0])} and gives {named(self.layout[1])}")
        fused = FusedEngine(name, engine, self.fused.input_names, self.fused.output_names)
        return DirectForward(fused, engine, self.inputs, self.heads, layout)

    def forward(self, exe: Any, kwargs: Mapping[str, Any]) -> List[Any]:
        """One inference forward of ``exe``: its ``outputs``, written (nothing is left queued on them).

        Raises:
            ValueError, TypeError: the keyword inputs, as MXNet's forward raises them.
            MxTrtError: the engine's run failed (typed, as the guarded forward raises it).
        """
        write_inputs(exe, kwargs)
        ins = [exe.arg_dict[n] if kind == "arg" else exe.aux_dict[n] for kind, n in self.inputs]
        outputs = exe.outputs
        outs = [outputs[j] for j in self.heads]
        for a in ins:
            a.wait_to_read()
        for o in outs:
            wait_to_write(o)
        try:
            run_on_host(self.fused, self.engine, ins, outs, ["write"] * len(outs), self.scratch, self.layout)
        except Exception:
            err, self.fused.last_error = self.fused.last_error, None
            if err is None:
                raise
            raise err from None
        return outputs
