"""One engine made of two: a head that runs its batch in chunks, and a tail over the whole batch.

For a static model of batch 2 or more that mixes samples only near its end (a
detector's box decoding and suppression), :func:`build_chain` cuts it with
:func:`mx_trt.export.batch_head.head_split` and has the backend build each part:
the head then runs its batch in chunks on one-thread streams
(:mod:`mx_trt.builder.backends.chunks`), the tail as one engine over the batch.
:class:`ChainEngine` runs them one after the other; the tensors between them live
in arrays it allocates once, the head writing model outputs it computes straight
into the caller's buffers.

Stored as one plan-cache entry: each part's files in its backend's format, named
``head.<file>`` and ``tail.<file>``, and the metadata of both. The files a part's
metadata names must be among the entry's own, as for any stored engine
(:func:`mx_trt.builder.engines.stored_engine_problem`).
"""
from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import tempfile
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from mx_trt.builder.backends.base import Backend, Buffer, BuildOptions, Engine, TensorSpec, specs_json, tensor_specs
from mx_trt.builder.backends.chunks import split_plan
from mx_trt.errors import EngineBuildError
from mx_trt.export.batch_head import head_split

logger = logging.getLogger(__name__)

#: The stored format of a chained engine.
FORMAT = "chain"
PARTS = ("head", "tail")


class ChainEngine(Engine):
    """``head`` then ``tail``, as one engine with the inputs and outputs of the model they were cut from.

    Args:
        head / tail: The parts' engines (their inputs and outputs named as the tensors of the model).
        inputs / outputs: The whole model's.
        cut: The tensors the head computes and the tail reads that are not model outputs.
    """

    def __init__(self, head: Engine, tail: Engine, inputs: List[TensorSpec], outputs: List[TensorSpec],
                 cut: List[TensorSpec], name: str) -> None:
        self.head, self.tail = head, tail
        self.inputs, self.outputs, self.cut = inputs, outputs, cut
        self.name = name
        self.batch_ranges = []
        known = {t.name for t in inputs + outputs + cut}
        missing = [t.name for t in head.inputs + head.outputs + tail.inputs + tail.outputs if t.name not in known]
        if missing:
            raise EngineBuildError(f"{name}: the parts of a chained engine name tensors it does not have: {missing}")
        self._arrays = {t.name: np.empty(t.shape, t.dtype) for t in cut}
        self._between = {n: Buffer(a.ctypes.data, tuple(a.shape), str(a.dtype)) for n, a in self._arrays.items()}
        self._bound_key: Optional[Tuple[Any, ...]] = None
        self._calls: List[Tuple[List[Buffer], List[Buffer]]] = []

    @property
    def split(self) -> Optional[Tuple[int, int]]:
        """The head's ``(sub-batch, streams)``."""
        return getattr(self.head, "split", None)

    def run(self, inputs: Sequence[Buffer], outputs: Sequence[Buffer]) -> None:
        key = tuple((b.ptr, b.shape) for b in inputs) + tuple((b.ptr, b.shape) for b in outputs)
        if key != self._bound_key:
            # Buffers of a bound executor are stable, so this runs once per executor.
            self.check_buffers(self.name, inputs, outputs)
            at: Dict[str, Buffer] = dict(self._between)
            at.update((t.name, b) for t, b in zip(self.inputs, inputs))
            at.update((t.name, b) for t, b in zip(self.outputs, outputs))
            self._calls = [([at[t.name] for t in part.inputs], [at[t.name] for t in part.outputs])
                           for part in (self.head, self.tail)]
            self._bound_key = key
        for part, (ins, outs) in zip((self.head, self.tail), self._calls):
            part.run(ins, outs)

    def stored_weights(self) -> Dict[str, Any]:
        return {**self.head.stored_weights(), **self.tail.stored_weights()}

    def save(self, directory: str) -> Dict[str, Any]:
        # A plan-cache entry holds files, not folders: each part's files go in as "<part>.<name>".
        metas, files = {}, {}
        for label, part in zip(PARTS, (self.head, self.tail)):
            folder = tempfile.mkdtemp(prefix=f"mx_trt_chain_{label}_")
            try:
                metas[label] = part.save(folder)
                files[label] = sorted(os.listdir(folder))
                for name in files[label]:
                    shutil.move(os.path.join(folder, name), os.path.join(directory, f"{label}.{name}"))
            finally:
                shutil.rmtree(folder, ignore_errors=True)
        return {"format": FORMAT, "parts": metas, "files": files, "inputs": specs_json(self.inputs),
                "outputs": specs_json(self.outputs), "cut": specs_json(self.cut), "batch_ranges": [],
                "split": list(self.split) if self.split else None}


def build_chain(backend: Backend, exported: Any, options: BuildOptions, batch: int,
                threads: int) -> Optional[ChainEngine]:
    """A :class:`ChainEngine` of ``exported`` built by ``backend``, its head in chunks on ``threads`` streams; or
    ``None`` (logged), and the caller builds one engine over the batch: when the model has no head worth it
    (:func:`~mx_trt.builder.backends.chunks.split_plan` decides for the head as for a whole model), or when
    cutting it or building a part failed.
    """
    try:
        found, reason = head_split(exported, batch)
    except Exception as exc:  # noqa: BLE001 - a model the cut does not understand: one engine, as before
        logger.warning("%s: could not cut the model for chunks (%s: %s); one engine over the batch", options.name,
                       type(exc).__name__, exc)
        return None
    if found is None:
        logger.debug("%s: one stream for the batch of %d: %s", options.name, batch, reason)
        return None
    if split_plan(found.head.model, batch, (), threads, f"{options.name} (head)")[0] is None:
        return None  # logged by split_plan
    try:
        head = backend.build(found.head, dataclasses.replace(options, name=f"{options.name} (head)",
                                                             extra=dict(options.extra)))
        split = getattr(head, "split", None)
        if split is None:
            logger.debug("%s: the head was built as one stream: one engine over the batch", options.name)
            return None
        tail = backend.build(found.tail, dataclasses.replace(options, name=f"{options.name} (tail)",
                                                             extra={**options.extra, "split": False}))
    except EngineBuildError as exc:
        logger.warning("%s: a part of the model cut for chunks did not build (%s); one engine over the batch",
                       options.name, exc)
        return None
    logger.info("%s: the batch of %d in chunks of %d through the part that holds %.0f%% of the work (%d tensors "
                "cross to the rest, which runs over the whole batch)", options.name, batch, split[0],
                100 * found.share, len(found.cut))
    return ChainEngine(head, tail, [TensorSpec(*s) for s in exported.input_specs],
                       [TensorSpec(*s) for s in exported.output_specs], [TensorSpec(*s) for s in found.cut],
                       options.name)


def load_chain(backend: Backend, meta: Mapping[str, Any], directory: str, options: BuildOptions) -> ChainEngine:
    """Load what :meth:`ChainEngine.save` wrote, each part by ``backend``.

    Raises:
        EngineBuildError: the metadata is malformed or a part cannot be loaded.
    """
    # Each part loads from a folder of links to its files, under the names it saved them with.
    links = tempfile.mkdtemp(prefix="mx_trt_chain_")
    try:
        parts, files = meta["parts"], meta["files"]
        inputs, outputs, cut = (tensor_specs(meta[k]) for k in ("inputs", "outputs", "cut"))
        loaded = []
        for label in PARTS:
            folder = os.path.join(links, label)
            os.makedirs(folder)
            for name in files[label]:
                if os.path.basename(str(name)) != name:
                    raise ValueError(f"file name {name!r}")
                os.symlink(os.path.abspath(os.path.join(directory, f"{label}.{name}")), os.path.join(folder, name))
            loaded.append(backend.load(parts[label], folder, dataclasses.replace(
                options, name=f"{options.name} ({label})", extra=dict(options.extra))))
    except (KeyError, TypeError, ValueError, OSError) as exc:
        raise EngineBuildError(f"{options.name}: stored chained engine is malformed: {exc!r}") from exc
    finally:
        shutil.rmtree(links, ignore_errors=True)
    return ChainEngine(loaded[0], loaded[1], inputs, outputs, cut, options.name)
