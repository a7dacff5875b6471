"""A batch in chunks on one-thread CPU streams: the plan and the runner both CPU backends share.

A CPU engine that splits each operator's work evenly over its threads waits, at
every operator, for its slowest thread: with another process holding one core,
the thread on that core. An engine of batch ``B`` whose ONNX graph computes each
sample on its own (:func:`mx_trt.export.separable.batch_split`) may instead run
chunks of ``sub`` samples on several one-thread streams, each stream taking the
next chunk when done with its last, so the stream on the busy core takes fewer.

* :func:`split_plan` decides (and rewrites reshapes that spell out the batch);
* :func:`chunk_layout` is the plan-cache key's part for it (the split depends on
  the CPUs the process may use);
* :func:`run_chunks` runs the chunks: the caller's thread is one stream, the
  others run on a shared pool (:func:`helpers`).

OpenVINO compiles its model at the sub-batch for that many streams
(``builder/backends/openvino.py``); ONNX Runtime builds a one-thread session at the
sub-batch and calls it from every stream at once (``builder/backends/onnxruntime.py``).
Both libraries release the GIL while they compute.
"""
from __future__ import annotations

import itertools
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, List, Optional, Sequence, Tuple

from mx_trt.builder.cpus import engine_threads
from mx_trt.export.separable import (
    batch_split,
    model_macs,
    short_product_share,
    split_sizes,
    tensor_shapes,
    without_batch_constants,
)
from mx_trt.passes.ir import BatchRange

logger = logging.getLogger(__name__)

#: Multiply-adds of one chunk below which a batch runs as one stream. Handing chunks to streams costs about
#: 0.2-0.3 ms a forward and 35 us a chunk (two threads): measured on OpenVINO, one stream against two, an MLP
#: at batch 8 (147 k multiply-adds a sample) 0.07 against 0.34 ms, a 3x3 convolution and a classifier over
#: 112x112 images at batch 8 (7.5 M a sample) 4.65 against 4.74 ms; MobileNetV2 (300 M a sample) gains 16% quiet.
SPLIT_MIN_CHUNK_MACS = 20_000_000
#: Matrix products of fewer rows than this (a convolution's output pixels in a chunk) run slower per
#: multiply-add than the same products over the whole batch. Measured on ResNet-50 at batch 8 and two threads
#: (AVX2): at 224x224 (the last stage 7x7, 49 rows a sample) chunks of 1 sample beat one stream, 562 against
#: 604 ms (ONNX Runtime) and 606 against 739 ms (OpenVINO); at 64x64 (the last two stages 4x4 and 2x2: 16 and
#: 4 rows) they lost, chunks of 1 68 against 58 ms and 66 against 52 ms, chunks of 2 47 against 43 ms and 42
#: against 38 ms.
SPLIT_MIN_ROWS = 48
#: The largest share of a model's multiply-adds that may run in products shorter than :data:`SPLIT_MIN_ROWS`
#: in a chunk. Chunks of more samples are tried, as long as each stream still takes two or more; the batch
#: runs as one stream when none keeps under it.
SPLIT_MAX_SHORT_SHARE = 0.25

#: ``(sub-batch, streams)``: chunks of ``sub`` samples on ``streams`` streams.
Split = Tuple[int, int]


def split_plan(model: Any, batch: int, ranges: Sequence[BatchRange], threads: int, name: str,
               min_chunk_macs: Optional[int] = None) -> Tuple[Optional[Split], Any]:
    """``(sub-batch, streams)`` when an engine of ``model`` at ``batch`` should run its batch in chunks on
    ``threads`` one-thread streams, else ``None`` (logged, with the reason); and the ONNX model to compile:
    ``model``, or a copy whose reshapes no longer spell out the batch.

    Batch-dynamic engines (``ranges``), one thread, and chunks of fewer than ``min_chunk_macs`` multiply-adds
    (:data:`SPLIT_MIN_CHUNK_MACS` when ``None``) stay one stream. O(model): one ONNX shape inference.
    """
    if min_chunk_macs is None:
        min_chunk_macs = SPLIT_MIN_CHUNK_MACS
    if ranges or threads < 2 or batch < 2:
        return None, model
    sub, streams = split_sizes(int(batch), threads)
    if streams < 2:
        return None, model
    shapes = tensor_shapes(model)  # one ONNX shape inference for every check
    size = _long_enough(model, shapes, int(batch), sub, threads)
    if size is None:
        logger.debug("%s: one stream for the batch of %d: chunks would compute with short matrix products", name,
                     batch)
        return None, model
    sub = size
    streams = min(threads, int(batch) // sub)
    chunk = model_macs(model, shapes) * sub // max(1, int(batch))
    if chunk < min_chunk_macs:
        logger.debug("%s: one stream for the batch of %d: %d multiply-adds a chunk are too few", name, batch, chunk)
        return None, model
    found = batch_split(model, int(batch), shapes)
    if found.reason is not None:
        logger.info("%s: one stream for the batch of %d: the graph may mix samples (%s)", name, batch, found.reason)
        return None, model
    if found.reshapes:
        logger.debug("%s: %d reshape(s) that spell out the batch rewritten for chunks of %d", name,
                     len(found.reshapes), sub)
        return (sub, streams), without_batch_constants(model, found.reshapes)
    return (sub, streams), model


def _long_enough(model: Any, shapes: Any, batch: int, sub: int, threads: int) -> Optional[int]:
    """The smallest chunk of at least ``sub`` samples (dividing ``batch``, two chunks or more for each of
    ``threads`` streams) whose short matrix products hold at most :data:`SPLIT_MAX_SHORT_SHARE` of the work, or
    ``None``."""
    for size in range(sub, batch // (2 * threads) + 1):
        if batch % size == 0 and \
                short_product_share(model, batch, size, SPLIT_MIN_ROWS, shapes) <= SPLIT_MAX_SHORT_SHARE:
            return size
    return None


def model_at_batch(model: Any, batch: int) -> Any:
    """A copy of ``model`` whose inputs and outputs have dimension 0 ``batch`` (a chunk's), without the shapes of
    its intermediate tensors (``value_info``: they held the whole batch; the library infers them again).
    ``model`` is unchanged; O(model proto size) (external weights are not copied)."""
    from onnx import ModelProto

    out = ModelProto()
    out.CopyFrom(model)
    inits = {t.name for t in out.graph.initializer}
    for v in list(out.graph.input) + list(out.graph.output):
        dims = v.type.tensor_type.shape.dim
        if v.name not in inits and len(dims):
            dims[0].dim_value = int(batch)
    del out.graph.value_info[:]
    return out


def chunk_layout(shapes: Sequence[Tuple[int, ...]], dynamic: bool, threads: int = 0) -> str:
    """The plan-cache key's part for a static batch that may be compiled in chunks for as many streams as
    ``threads`` (0: the CPUs this process may use): an engine stored by a process with other CPUs would run
    its batch otherwise. Whether the graph allows it is the same for every count, so it is not read here."""
    if dynamic or not shapes or not shapes[0] or int(shapes[0][0]) < 2:
        return ""
    sub, streams = split_sizes(int(shapes[0][0]), threads or engine_threads())
    return f"chunks of {sub} on {streams} streams" if streams > 1 else "one stream"


def streams_at_load(split: Any, batch: int, threads: int) -> Split:
    """A stored engine's ``(sub-batch, streams)`` in this process: the stored sub-batch (the compiled shape), as
    many streams as ``threads`` allows.

    Raises:
        ValueError: ``split`` is not a stored split (``[sub, streams]`` with ``sub`` dividing ``batch``).
    """
    try:
        sub = int(split[0])
    except (TypeError, ValueError, IndexError) as exc:
        raise ValueError(f"malformed split {split!r}") from exc
    if sub < 1 or batch % sub:
        raise ValueError(f"split {split!r}: chunks of {sub} do not divide the batch of {batch}")
    return sub, max(1, min(threads, batch // sub))


_pool: Optional[ThreadPoolExecutor] = None
_pool_lock = threading.Lock()


def helpers() -> ThreadPoolExecutor:
    """The threads that run chunks beside the caller (one fewer than the usable CPUs, at least one), shared by
    every split engine of the process."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max(1, engine_threads() - 1), thread_name_prefix="mx_trt-chunks")
        return _pool


def run_chunks(streams: Sequence[Callable[[int], None]], chunks: int) -> None:
    """Run chunks ``0 .. chunks - 1``: ``streams[s](k)`` runs chunk ``k`` on stream ``s``.

    Each stream takes the next chunk when done with its last (dynamic: a stream slowed by load takes fewer).
    Stream 0 runs on the caller's thread, the others on :func:`helpers`. Every stream finishes before this
    returns; the first error raised by a stream is raised here.
    """
    order = itertools.count()  # next() of a count is atomic under the GIL

    def work(run: Callable[[int], None]) -> None:
        while True:
            k = next(order)
            if k >= chunks:
                return
            run(k)

    pool = _pool if _pool is not None else helpers()  # the lock only until the pool exists
    others = [pool.submit(work, s) for s in streams[1:]]
    errors: List[Optional[BaseException]] = []
    try:
        work(streams[0])
    finally:
        errors = [f.exception() for f in others]
    for exc in errors:
        if exc is not None:
            raise exc
