"""The backend interface: build an engine from an ONNX subgraph, run it on raw buffers.

A backend turns an :class:`~mx_trt.onnx_export.ExportedSubgraph` plus its input
shapes into an :class:`Engine`. The fused MXNet node then calls
:meth:`Engine.run` with the raw data pointers of MXNet's own NDArrays, so no
tensor is copied on the way in or out.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..converters.registry import OpSpec

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
        name: The subgraph's name, for logs and errors.
        extra: Backend-specific options.
    """

    device_id: int = -1
    fp16: bool = False
    name: str = "subgraph"
    extra: Dict[str, Any] = field(default_factory=dict)


class Engine(abc.ABC):
    """A built engine for one subgraph. Thread-compatible: one ``run`` at a time."""

    inputs: List[TensorSpec]
    outputs: List[TensorSpec]

    @abc.abstractmethod
    def run(self, inputs: Sequence[Buffer], outputs: Sequence[Buffer]) -> None:
        """Run once, reading ``inputs`` and writing every buffer in ``outputs``.

        Buffers follow the order of :attr:`inputs` / :attr:`outputs`. Output
        buffers never alias input buffers (the caller guarantees it).

        Raises:
            ShapeError: a buffer's shape or dtype does not match the engine.
            EngineRunError: the backend failed.
        """

    def output_shapes(self, input_shapes: Sequence[Shape]) -> List[Shape]:
        """Output shapes for the given input shapes (static engines: the bound ones).

        Raises:
            ShapeError: the engine cannot run these shapes.
        """
        from ..errors import ShapeError

        want = [t.shape for t in self.inputs]
        got = [tuple(s) for s in input_shapes]
        if got != want:
            raise ShapeError(f"engine was built for input shapes {want}, got {got}; bind again to build a new engine")
        return [t.shape for t in self.outputs]


class Backend(abc.ABC):
    """A way to build engines."""

    #: Registry name, as in ``MXNET_TENSORRT_BACKEND``.
    name: str = ""

    @classmethod
    @abc.abstractmethod
    def unavailable_reason(cls) -> Optional[str]:
        """``None`` if the backend can be used here, else why not (missing package...)."""

    def supports(self, spec: OpSpec) -> Optional[str]:
        """Backend-specific restrictions beyond the converter's own validator."""
        return None

    @abc.abstractmethod
    def version(self) -> str:
        """Library version, part of the engine cache key."""

    @abc.abstractmethod
    def build(self, exported: Any, options: BuildOptions) -> Engine:
        """Build an engine from an :class:`~mx_trt.onnx_export.ExportedSubgraph`.

        Raises:
            EngineBuildError: the build failed; the message names the subgraph.
        """
