"""The backend interface: build an engine from an ONNX subgraph, run it on raw buffers.

A backend turns an :class:`~mx_trt.export.subgraph.ExportedSubgraph` plus its input
shapes into an :class:`Engine`. The fused MXNet node then calls
:meth:`Engine.run` with the raw data pointers of MXNet's own NDArrays, so no
tensor is copied on the way in or out.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from mx_trt.errors import EngineBuildError, ShapeError
from mx_trt.export.int8 import TENSORRT_STYLE, Int8Style
from mx_trt.export.spec import OpSpec
from mx_trt.passes.ir import BatchRange

Shape = Tuple[int, ...]


@dataclass(frozen=True)
class Buffer:
    """A tensor in memory owned by someone else (an MXNet NDArray).

    Attributes:
        ptr: Address of the first element.
        shape: Its shape.
        dtype: Numpy dtype name.
        device_id: GPU ordinal, or -1 for host memory.
    """

    ptr: int
    shape: Shape
    dtype: str
    device_id: int = -1


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: Shape
    dtype: str


@dataclass
class BuildOptions:
    """What a build may depend on besides the ONNX model.

    Attributes:
        device_id: GPU ordinal or -1 for the CPU.
        fp16: Build a reduced-precision engine where the backend can.
        bf16: Build a bfloat16 engine from the float32 export: the backend computes in bfloat16
            its own way (OpenVINO's inference precision, TensorRT's ``BF16`` flag or a bfloat16
            graph for strongly typed networks); inputs and outputs stay float32. Only asked of a
            backend whose :meth:`Backend.precision_reason` for ``bf16`` is ``None``.
        name: The subgraph's name, for logs and errors.
        extra: Backend-specific options.
    """

    device_id: int = -1
    fp16: bool = False
    bf16: bool = False
    name: str = "subgraph"
    extra: Dict[str, Any] = field(default_factory=dict)


class Engine(abc.ABC):
    """A built engine for one subgraph. Thread-compatible: one ``run`` at a time.

    Attributes:
        inputs / outputs: Tensor specs at the bound shapes.
        batch_ranges: ``(min, opt, max)`` of dimension 0 per optimization profile;
            empty for a static engine. With ranges, dimension 0 of every input and
            output is the batch and may take any value inside one range.
    """

    inputs: List[TensorSpec]
    outputs: List[TensorSpec]
    batch_ranges: List[BatchRange] = []

    @abc.abstractmethod
    def run(self, inputs: Sequence[Buffer], outputs: Sequence[Buffer]) -> None:
        """Run once, reading ``inputs`` and writing every buffer in ``outputs``.

        Buffers follow the order of :attr:`inputs` / :attr:`outputs`. Output
        buffers never alias input buffers (the caller guarantees it).

        Raises:
            ShapeError: a buffer's shape or dtype does not match the engine.
            EngineRunError: the backend failed.
        """

    def covers(self, batch: int) -> bool:
        """Whether some profile admits ``batch`` (static engines: only the bound batch)."""
        if not self.batch_ranges:
            return bool(self.inputs) and all(t.shape and t.shape[0] == batch for t in self.inputs)
        return any(lo <= batch <= hi for lo, _, hi in self.batch_ranges)

    def output_shapes(self, input_shapes: Sequence[Shape]) -> List[Shape]:
        """Output shapes for the given input shapes.

        Static engines accept exactly their bound shapes; dynamic ones any batch
        inside a profile, with every other dimension as bound.

        Raises:
            ShapeError: the engine cannot run these shapes.
        """
        want = [t.shape for t in self.inputs]
        got = [tuple(int(d) for d in s) for s in input_shapes]
        if not self.batch_ranges:
            if got != want:
                raise ShapeError(f"engine was built for input shapes {want}, got {got}; bind again to build a new engine")
            return [t.shape for t in self.outputs]
        if len(got) != len(want) or any(g[1:] != w[1:] or len(g) != len(w) for g, w in zip(got, want)):
            raise ShapeError(f"engine takes input shapes {want} with a variable batch (dimension 0), got {got}")
        batches = {g[0] for g in got}
        if len(batches) != 1:
            raise ShapeError(f"inputs disagree on the batch size: {got}")
        b = batches.pop()
        if not self.covers(b):
            raise ShapeError(f"batch {b} is outside the engine's profiles {self.batch_ranges} (min, opt, max)")
        return [(b,) + t.shape[1:] for t in self.outputs]

    def check_buffers(self, name: str, inputs: Sequence["Buffer"], outputs: Sequence["Buffer"]) -> None:
        """Raise :class:`ShapeError` unless the buffers fit the engine (see :meth:`output_shapes`)."""
        if len(inputs) != len(self.inputs) or len(outputs) != len(self.outputs):
            raise ShapeError(f"{name}: engine takes {len(self.inputs)} inputs / {len(self.outputs)} outputs, "
                             f"got {len(inputs)} / {len(outputs)}")
        for spec, b in zip(self.inputs + self.outputs, list(inputs) + list(outputs)):
            if b.dtype != spec.dtype:
                raise ShapeError(f"{name}: tensor {spec.name!r} is {spec.dtype}, got a {b.dtype} buffer")
        expect = self.output_shapes([b.shape for b in inputs])
        for spec, b, shape in zip(self.outputs, outputs, expect):
            if tuple(b.shape) != tuple(shape):
                raise ShapeError(f"{name}: output {spec.name!r} has shape {shape}, the buffer is {b.shape}")

    def stored_weights(self) -> Dict[str, Any]:
        """The weights a stored copy of this engine is fed at load, by initializer name (views where possible).

        What :meth:`Backend.load` receives as ``options.extra["weights"]()`` when
        the caller has no exporter at hand (an export made by
        :func:`mx_trt.export_model`). Empty for engines that store their weights.
        """
        return {}

    def save(self, directory: str) -> Dict[str, Any]:
        """Write what :meth:`Backend.load` needs into ``directory``; return JSON metadata.

        Raises:
            NotImplementedError: the engine cannot be serialized (it is then not cached).
        """
        raise NotImplementedError


class Backend(abc.ABC):
    """A way to build engines."""

    #: Registry name, as in ``MXNET_TENSORRT_BACKEND``.
    name: str = ""
    #: The form of INT8 graphs this backend runs (the calibration table is the same for all):
    #: TensorRT's symmetric int8 unless a backend says otherwise.
    int8_style: Int8Style = TENSORRT_STYLE
    #: Element types (numpy names) this backend's engines hold, inside and at their
    #: inputs and outputs. A node with a tensor of another type stays native.
    tensor_dtypes: Tuple[str, ...] = ("float32", "float16")

    @classmethod
    @abc.abstractmethod
    def unavailable_reason(cls) -> Optional[str]:
        """``None`` if the backend can be used here, else why not (missing package...)."""

    def supports(self, spec: OpSpec) -> Optional[str]:
        """Backend-specific restrictions beyond the converter's own validator."""
        return None

    def precision_reason(self, precision: str) -> Optional[str]:
        """``None`` if this backend builds engines of ``precision`` here, else why not (bf16: see BuildOptions.bf16)."""
        if precision == "bf16":
            return f"{self.name} engines have no bfloat16 precision"
        return None

    def slower_than_native(self, spec: OpSpec) -> Optional[str]:
        """Why this backend runs the converted node far slower than MXNet's own kernel, or ``None``.

        Such a node converts (a whole-model export, the ``always`` rule, takes it), but the
        cost and measured rules leave it to MXNet: an engine boundary costs less than the
        difference. The measured rule times whole subgraphs, so it cannot find this itself.
        """
        return None

    def dtype_reason(self, spec: OpSpec) -> Optional[str]:
        """Why a tensor type of ``spec`` cannot be held by this backend's engines, or ``None``."""
        for what, dts in (("input", spec.in_dtypes), ("output", spec.out_dtypes)):
            for i, dt in enumerate(dts):
                if dt not in self.tensor_dtypes:
                    return (f"{what} {i} is {dt}, which {self.name} engines do not hold "
                            f"(they take {', '.join(self.tensor_dtypes)})")
        return None

    @abc.abstractmethod
    def version(self) -> str:
        """Library version, part of the engine cache key."""

    def device_signature(self, device_id: int) -> str:
        """What about the device an engine depends on (part of the cache key)."""
        import platform

        return f"{platform.system()}-{platform.machine()}"

    def layout_for(self, shapes: Sequence[Shape], dynamic: bool) -> str:
        """What else a compiled engine of these input shapes depends on in this process, beside the library and
        device (part of the plan-cache key when not empty); ``dynamic``: a batch-dynamic engine."""
        return ""

    @abc.abstractmethod
    def build(self, exported: Any, options: BuildOptions) -> Engine:
        """Build an engine from an :class:`~mx_trt.export.subgraph.ExportedSubgraph`.

        ``options.extra["batch_ranges"]`` holds the batch profiles when the
        exported model's dimension 0 is the symbolic ``batch``.

        Raises:
            EngineBuildError: the build failed; the message names the subgraph.
        """

    def load(self, meta: Mapping[str, Any], directory: str, options: BuildOptions) -> Engine:
        """Rebuild an engine from what :meth:`Engine.save` wrote.

        Raises:
            EngineBuildError: the stored engine cannot be loaded.
        """
        raise EngineBuildError(f"the {self.name} backend cannot load stored engines")


def tensor_specs(meta: Sequence[Mapping[str, Any]]) -> List[TensorSpec]:
    """TensorSpecs from their JSON form ``[{"name", "shape", "dtype"}]``."""
    return [TensorSpec(str(m["name"]), tuple(int(d) for d in m["shape"]), str(m["dtype"])) for m in meta]


def specs_json(specs: Sequence[TensorSpec]) -> List[Dict[str, Any]]:
    return [{"name": t.name, "shape": list(t.shape), "dtype": t.dtype} for t in specs]


def trim_heap() -> None:
    """Give freed heap back to the system (glibc keeps it otherwise); a no-op elsewhere."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
