"""One served model instance: a checkpoint bound with the pass, run on batches of any size up to the maximum.

:class:`ServedModel` binds once, at the largest batch, through the
``simple_bind`` front-end with ``MXNET_TENSORRT_MAX_BATCH_SIZE`` set to it:
the pass's own bind (weights handed over as ``shared_buffer``, the fallback to
a native bind with one warning, ``MXNET_TENSORRT_STRICT``), and engines whose
batch profile is 1 to that maximum. A batch of ``b`` runs on
``executor.reshape`` to ``b``: the reshaped executor shares the bound one's
memory and reuses its engines (within the profile, nothing is rebuilt).
Reshaped executors are kept per batch size, at most ``max_batch`` of them.

Every request is checked before it joins a batch (:meth:`ServedModel.check`):
a missing or unknown input, another dtype, a shape whose sample dimensions
differ, a batch over the maximum, and (unless allowed) NaN or Inf in a float
input each give a one-line reason, so that one bad request never reaches the
executor and never harms the others. A forward that raises fails only the
request that made it raise (:class:`RequestFailure`), and the instance goes
on serving. Nothing here imports Triton.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from mx_trt.errors import ServeError, ShapeError
from mx_trt.frontends.common import scoped_options
from mx_trt.frontends.hook import disabled
from mx_trt.frontends.simple_bind import accelerated_simple_bind

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TensorSpec:
    """A served input or output: its name, numpy dtype name and the dimensions of one sample (batch excluded)."""

    name: str
    dtype: str
    dims: Tuple[int, ...]

    def to_json(self) -> Dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "dims": list(self.dims)}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "TensorSpec":
        return cls(str(doc["name"]), str(np.dtype(doc["dtype"]).name), tuple(int(d) for d in doc["dims"]))


def output_specs(symbol: Any, params: Mapping[str, Any], inputs: Sequence[TensorSpec]) -> List[TensorSpec]:
    """The model's outputs at batch 1 (MXNet's shape and type inference), batch dimension dropped.

    Raises:
        ServeError: inference fails, or an output has no batch dimension that follows the inputs'.
    """
    shapes = {k: tuple(v.shape) for k, v in params.items()}
    types = {k: np.dtype(v.dtype) for k, v in params.items()}
    out: List[TensorSpec] = []
    try:
        for batch in (1, 2):
            shapes.update({t.name: (batch,) + t.dims for t in inputs})
            types.update({t.name: np.dtype(t.dtype) for t in inputs})
            args = set(symbol.list_arguments()) | set(symbol.list_auxiliary_states())
            _, out_shapes, _ = symbol.infer_shape(**{k: v for k, v in shapes.items() if k in args})
            _, out_types, _ = symbol.infer_type(**{k: v for k, v in types.items() if k in args})
            specs = [TensorSpec(n, np.dtype(t).name, tuple(int(d) for d in s[1:]))
                     for n, s, t in zip(symbol.list_outputs(), out_shapes, out_types)]
            bad = [n for n, s in zip(symbol.list_outputs(), out_shapes) if not s or s[0] != batch]
            if bad:
                raise ServeError(f"output {bad[0]!r} has no batch dimension (dimension 0 does not follow the inputs' "
                                 "batch): a batched server cannot split it between requests")
            if out and out != specs:
                raise ServeError("the outputs' sample dimensions change with the batch: not servable in batches")
            out = specs
    except ServeError:
        raise
    except Exception as exc:  # MXNet's inference errors
        raise ServeError(f"cannot infer the model's outputs for inputs "
                         f"{[(t.name, t.dims) for t in inputs]}: {' '.join(str(exc).split())[:300]}") from None
    return out


@dataclass(frozen=True)
class RequestFailure:
    """A request that passed :meth:`ServedModel.check` but whose forward raised: the one-line message."""

    message: str

    @classmethod
    def of(cls, exc: BaseException) -> "RequestFailure":
        text = " ".join(str(exc).split())[:500]
        return cls(f"inference failed: {type(exc).__name__}: {text}")


class ServedModel:
    """A checkpoint bound for serving: one executor, reshaped per batch size; thread-safe.

    Args:
        symbol / arg_params / aux_params: The checkpoint (as ``mx.model.load_checkpoint`` gives it).
        inputs: The data inputs with their dtypes and sample dimensions.
        max_batch: The largest batch (the engines' batch profile is 1 to it).
        ctx: The MXNet context.
        accelerate: Bind with the pass (``False``: MXNet's own bind, for comparisons).
        allow_nonfinite: Let NaN and Inf inputs through (by default they are refused).

    Raises:
        ServeError: an input or output cannot be batched, or MXNet cannot bind the model.
    """

    def __init__(self, symbol: Any, arg_params: Mapping[str, Any], aux_params: Mapping[str, Any],
                 inputs: Sequence[TensorSpec], max_batch: int, ctx: Any, accelerate: bool = True,
                 allow_nonfinite: bool = False) -> None:
        if max_batch < 1:
            raise ServeError(f"max_batch must be >= 1, got {max_batch}")
        self.inputs = list(inputs)
        self.max_batch = int(max_batch)
        self.allow_nonfinite = allow_nonfinite
        params = {**dict(arg_params), **dict(aux_params)}
        self.outputs = output_specs(symbol, params, self.inputs)
        shapes = {t.name: (self.max_batch,) + t.dims for t in self.inputs}
        type_dict = {t.name: np.dtype(t.dtype) for t in self.inputs}
        try:
            if accelerate:
                with scoped_options({"max_batch_size": self.max_batch}):  # this bind's option, no other's
                    # Aux states in shared_buffer too: the engines absorb them as weights (as the CLI binds).
                    exe = accelerated_simple_bind(symbol, ctx, grad_req="null", type_dict=type_dict,
                                                  shared_buffer=params, **shapes)
            else:
                with disabled():
                    exe = symbol.simple_bind(ctx, grad_req="null", type_dict=type_dict,
                                             shared_buffer=dict(arg_params), **shapes)
        except Exception as exc:  # MXNet's own bind errors (a strict pass error is a typed one)
            raise ServeError(f"cannot bind the model at batch {self.max_batch}: {' '.join(str(exc).split())[:400]}") \
                from exc
        # Native weights and aux states: simple_bind never takes aux states from shared_buffer.
        exe.copy_params_from({k: v for k, v in arg_params.items() if k in exe.arg_dict},
                             {k: v for k, v in aux_params.items() if k in exe.aux_dict})
        self.info = getattr(exe, "_mx_trt", None)
        self._bound = exe
        self._by_batch: Dict[int, Any] = {self.max_batch: exe}
        self._lock = threading.Lock()
        self.batches_run = 0
        self.samples_run = 0
        logger.info("serving %s at batch <= %d: %s", [t.name for t in self.inputs], self.max_batch,
                    f"{len(self.info.engines)} engine(s)" if self.info is not None else "native bind")

    def _executor(self, batch: int) -> Any:
        exe = self._by_batch.get(batch)
        if exe is None:
            exe = self._bound.reshape(**{t.name: (batch,) + t.dims for t in self.inputs})
            self._by_batch[batch] = exe
        return exe

    def check(self, arrays: Mapping[str, np.ndarray]) -> Optional[str]:
        """Why one request cannot run (one line), or ``None``. O(request size) for the NaN check."""
        names = [t.name for t in self.inputs]
        unknown = sorted(set(arrays) - set(names))
        if unknown:
            return f"unknown input {unknown[0]!r}; the model's inputs are {', '.join(names)}"
        batch: Optional[int] = None
        for spec in self.inputs:
            arr = arrays.get(spec.name)
            if arr is None:
                return f"input {spec.name!r} is missing; the model's inputs are {', '.join(names)}"
            if np.dtype(arr.dtype).name != spec.dtype:
                return f"input {spec.name!r} has dtype {np.dtype(arr.dtype).name}; the model takes {spec.dtype}"
            if arr.ndim != len(spec.dims) + 1 or tuple(arr.shape[1:]) != spec.dims:
                return (f"input {spec.name!r} has shape {tuple(arr.shape)}; the model takes "
                        f"[batch, {', '.join(str(d) for d in spec.dims)}]")
            if batch is not None and arr.shape[0] != batch:
                return f"inputs disagree on the batch size ({batch} and {arr.shape[0]} for {spec.name!r})"
            batch = int(arr.shape[0])
            if not 1 <= batch <= self.max_batch:
                return f"batch size {batch} of input {spec.name!r} is outside 1..{self.max_batch}"
            if not self.allow_nonfinite and arr.dtype.kind == "f" and not np.isfinite(arr).all():
                bad = int(arr.size - np.count_nonzero(np.isfinite(arr)))
                return f"input {spec.name!r} holds {bad} NaN or Inf value(s); send finite values"
        return None

    def run(self, arrays: Mapping[str, np.ndarray]) -> List[np.ndarray]:
        """Outputs (numpy, in :attr:`outputs` order) for one batch of checked inputs.

        Raises:
            ShapeError: the inputs fail :meth:`check`.
        """
        problem = self.check(arrays)
        if problem is not None:
            raise ShapeError(problem)
        batch = int(arrays[self.inputs[0].name].shape[0])
        with self._lock:
            exe = self._executor(batch)
            for spec in self.inputs:
                exe.arg_dict[spec.name][:] = arrays[spec.name]
            exe.forward(is_train=False)
            outs = [o.asnumpy() for o in exe.outputs]
            self.batches_run += 1
            self.samples_run += batch
        return outs

    def run_requests(self, requests: Sequence[Mapping[str, np.ndarray]]) -> List[Any]:
        """Run good requests as one batch; each result is a list of outputs, the reason it was refused (a
        ``str``), or a :class:`RequestFailure`.

        Requests that fail :meth:`check` get their reason and stay out of the
        batch; the others are concatenated (up to ``max_batch`` samples at a
        time) and split again. A batch whose forward raises (a plugin's
        exception, an engine error) is run again one request at a time, so
        that only the request that makes it fail gets a :class:`RequestFailure`
        and the executor goes on serving.
        """
        results: List[Any] = [None] * len(requests)
        good: List[int] = []
        for i, req in enumerate(requests):
            problem = self.check(req)
            if problem is None:
                good.append(i)
            else:
                results[i] = problem
        for chunk in self._chunks(requests, good):
            joined = {t.name: requests[chunk[0]][t.name] if len(chunk) == 1
                      else np.concatenate([requests[i][t.name] for i in chunk]) for t in self.inputs}
            try:
                outs = self.run(joined)
            except Exception as exc:  # anything the forward raises: the requests, not the instance, fail
                if len(chunk) == 1:
                    results[chunk[0]] = RequestFailure.of(exc)
                    continue
                logger.warning("a batch of %d requests failed (%s); running them one by one", len(chunk),
                               RequestFailure.of(exc).message)
                for i in chunk:
                    results[i] = self.run_requests([requests[i]])[0]
                continue
            at = 0
            for i in chunk:
                n = int(requests[i][self.inputs[0].name].shape[0])
                results[i] = [o[at:at + n] for o in outs]
                at += n
        return results

    def _chunks(self, requests: Sequence[Mapping[str, np.ndarray]], good: List[int]) -> List[List[int]]:
        """``good`` split, in order, into runs of at most ``max_batch`` samples."""
        chunks: List[List[int]] = []
        total = 0
        for i in good:
            n = int(requests[i][self.inputs[0].name].shape[0])
            if not chunks or total + n > self.max_batch:
                chunks.append([])
                total = 0
            chunks[-1].append(i)
            total += n
        return chunks
