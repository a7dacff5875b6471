"""The model a command works on: a saved checkpoint, its input shapes and input arrays.

:func:`load_model` is what every command starts with: it imports the user's
modules (``--import``), reads the checkpoint, checks ``--shape`` (and
``--input``) against the model with MXNet's shape inference, and reports any
problem as one :class:`~mx_trt.tools.cli.options.UsageError`.
"""
from __future__ import annotations

import argparse
import glob
import importlib
import importlib.util
import logging
import os
import re
import sys
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from mx_trt.tools.cli.options import INT32_MAX, Shape, UsageError, parse_shape, shapes_text

logger = logging.getLogger(__name__)


@dataclass
class Checkpoint:
    """A loaded checkpoint.

    Attributes:
        prefix: The prefix it was loaded from.
        epoch: The epoch of the params file.
        symbol: The symbol.
        arg_params / aux_params: The weights (NDArrays).
    """

    prefix: str
    epoch: int
    symbol: Any
    arg_params: Dict[str, Any]
    aux_params: Dict[str, Any]

    @property
    def params(self) -> Dict[str, Any]:
        return {**self.arg_params, **self.aux_params}

    def data_inputs(self) -> List[str]:
        """Arguments and aux states without a value in the checkpoint, in symbol order."""
        args = [a for a in self.symbol.list_arguments() if a not in self.arg_params]
        aux = [a for a in self.symbol.list_auxiliary_states() if a not in self.aux_params]
        return args + aux


def mxnet_message(exc: BaseException) -> str:
    """The informative line of an MXNet error, without the C++ trace, timestamps and file positions."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    picked = ""
    for ln in reversed(lines):
        if not ln.startswith(("File ", "Traceback", "Stack trace", "[bt]")):
            picked = ln
            break
    picked = re.sub(r"^(MXNetError: )+", "", picked or (lines[0] if lines else type(exc).__name__))
    picked = re.sub(r"\[\d\d:\d\d:\d\d\] \S+:\d+: ", "", picked)
    return picked


def _latest_epoch(prefix: str) -> int:
    found = []
    for path in glob.glob(glob.escape(prefix) + "-*.params"):
        m = re.fullmatch(r"-([0-9]+)\.params", path[len(prefix):])
        if m:
            found.append(int(m.group(1)))
    if not found:
        raise UsageError(f"no params file {prefix}-NNNN.params (save the checkpoint with mx.model.save_checkpoint)")
    return max(found)


def import_user_module(spec: str) -> None:
    """Import a module or a ``.py`` file, typically to register custom operators.

    Raises:
        UsageError: it cannot be imported.
    """
    try:
        if spec.endswith(".py") or os.sep in spec:
            if not os.path.isfile(spec):
                raise UsageError(f"--import {spec}: no such file")
            name = "mxtrt_user_" + re.sub(r"\W", "_", os.path.splitext(os.path.basename(spec))[0])
            mspec = importlib.util.spec_from_file_location(name, spec)
            if mspec is None or mspec.loader is None:
                raise UsageError(f"--import {spec}: not a Python file")
            module = importlib.util.module_from_spec(mspec)
            sys.modules[name] = module
            mspec.loader.exec_module(module)
        else:
            importlib.import_module(spec)
    except UsageError:
        raise
    except Exception as exc:  # any error of the user's module
        raise UsageError(f"--import {spec}: {type(exc).__name__}: {exc}") from None
    logger.debug("imported %s", spec)


def load_checkpoint(prefix: str, epoch: Optional[int] = None) -> Checkpoint:
    """Load ``PREFIX-symbol.json`` and ``PREFIX-EPOCH.params`` (the latest epoch by default).

    Raises:
        UsageError: a file is missing or unreadable, or the symbol uses an
            unregistered custom operator.
    """
    import mxnet as mx

    sym_path = f"{prefix}-symbol.json"
    if not os.path.isfile(sym_path):
        raise UsageError(f"no symbol file {sym_path} (give the checkpoint prefix, without -symbol.json)")
    if epoch is None:
        epoch = _latest_epoch(prefix)
    params_path = f"{prefix}-{epoch:04d}.params"
    if not os.path.isfile(params_path):
        raise UsageError(f"no params file {params_path}")
    try:
        sym = mx.sym.load(sym_path)
    except mx.base.MXNetError as exc:
        msg = mxnet_message(exc)
        m = re.search(r"Cannot find custom operator (\S+)", msg)
        if m:
            raise UsageError(f"{sym_path} uses the custom operator {m.group(1)!r}, which is not registered: "
                             "import the module that registers it with --import MODULE") from None
        raise UsageError(f"cannot read {sym_path}: {msg}") from None
    try:
        saved = mx.nd.load(params_path)
    except mx.base.MXNetError as exc:
        raise UsageError(f"cannot read {params_path}: {mxnet_message(exc)}") from None
    if not isinstance(saved, dict):
        raise UsageError(f"{params_path} holds a list of arrays, not named arg:/aux: parameters")
    args, aux = {}, {}
    for key, value in saved.items():
        kind, _, name = key.partition(":")
        if kind == "arg":
            args[name] = value
        elif kind == "aux":
            aux[name] = value
    logger.debug("loaded %s epoch %d: %d args, %d aux", prefix, epoch, len(args), len(aux))
    return Checkpoint(prefix, epoch, sym, args, aux)


def resolve_shapes(ckpt: Checkpoint, given: Mapping[str, Shape], arrays: Optional[Mapping[str, np.ndarray]] = None) -> Dict[str, Shape]:
    """Check the data-input shapes against the model.

    Args:
        ckpt: The checkpoint.
        given: ``--shape`` values.
        arrays: User input arrays (their shapes count as given).

    Returns:
        The shapes to bind with (given, or from the arrays).

    Raises:
        UsageError: an unknown input name, a weight named as an input, an
            array contradicting ``--shape``, an input without a shape, shapes
            MXNet's inference rejects, a tensor over :func:`max_elements`, or
            tensors that cannot fit in :func:`available_memory`.
    """
    import mxnet as mx

    inputs = ckpt.data_inputs()
    params = ckpt.params

    def check_name(name: str, what: str) -> None:
        if name in inputs:
            return
        if name in params:
            raise UsageError(f"{what} {name!r} is a weight stored in the checkpoint, not an input "
                             f"(the model's inputs: {', '.join(inputs) or 'none'})")
        raise UsageError(f"{what}: unknown input {name!r} (the model's inputs: {', '.join(inputs) or 'none'})")

    shapes: Dict[str, Shape] = {}
    for name, shape in given.items():
        check_name(name, "--shape")
        shapes[name] = tuple(shape)
    for name, arr in (arrays or {}).items():
        check_name(name, "--input")
        if name in shapes and tuple(arr.shape) != shapes[name]:
            raise UsageError(f"--input array {name!r} has shape {tuple(arr.shape)}, but --shape says {shapes[name]}")
        shapes[name] = tuple(int(d) for d in arr.shape)
    known = {k: tuple(v.shape) for k, v in params.items()}
    known.update(shapes)
    sym = ckpt.symbol
    limit = max_elements()
    too_big = [k for k, v in shapes.items() if _elements(v) > limit]
    if too_big:
        raise UsageError(f"input {too_big[0]}={','.join(str(d) for d in shapes[too_big[0]])} has "
                         f"{_elements(shapes[too_big[0]]):,} elements; MXNet handles at most {limit:,} per tensor")
    try:
        arg_shapes, out_shapes, aux_shapes = sym.infer_shape_partial(**known)
    except Exception as exc:  # MXNetError, or the plain Exception MXNet raises for a dimension over 2**31 - 1
        missing = [n for n in inputs if n not in shapes]
        if missing:
            raise UsageError(f"no shape for input {missing[0]!r}: add --shape {missing[0]}=d0,d1,...") from None
        raise UsageError(f"the shapes {shapes_text(shapes)} do not fit the model: {mxnet_message(exc)}") from None
    inferred = dict(zip(sym.list_arguments(), arg_shapes or []))
    inferred.update(zip(sym.list_auxiliary_states(), aux_shapes or []))
    for name in inputs:
        s = inferred.get(name)
        if not s or any(d <= 0 for d in s):
            raise UsageError(f"no shape for input {name!r}: add --shape {name}=d0,d1,...")
    bad = [o for o, s in zip(sym.list_outputs(), out_shapes or []) if not s or any(d <= 0 for d in s)]
    if bad:
        raise UsageError(f"the shapes {shapes_text(shapes)} leave the shapes of {', '.join(bad)} unknown")
    tensors = list(inferred.items()) + list(zip(sym.list_outputs(), out_shapes))
    try:
        internals = sym.get_internals()
        _, inner, _ = internals.infer_shape_partial(**known)
        tensors += [max(zip(internals.list_outputs(), inner), key=lambda t: _elements(t[1] or ()))]
    except Exception:  # the outputs' inference passed, so this cannot fail for a real reason; skip the estimate
        logger.debug("no shapes for the internal tensors", exc_info=True)
    _check_size(shapes, tensors, limit)
    return shapes


#: Bytes per element assumed for the memory estimate (the commands feed float32).
_ITEM_BYTES = 4


def _elements(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def max_elements() -> int:
    """Largest element count of one tensor this MXNet handles: 2**31 - 1 unless built with ``USE_INT64_TENSOR_SIZE``."""
    import mxnet as mx

    try:
        wide = bool(mx.runtime.Features().is_enabled("INT64_TENSOR_SIZE"))
    except Exception:  # an MXNet without the feature list: assume the default build
        wide = False
    return 2**63 - 1 if wide else INT32_MAX


def available_memory() -> Optional[int]:
    """Bytes of memory this process may still use: ``MemAvailable``, capped by a cgroup v2 limit; ``None`` if unknown."""
    found: List[int] = []
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    found.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open("/sys/fs/cgroup/memory.max", encoding="ascii") as f:
            cap = f.read().strip()
        with open("/sys/fs/cgroup/memory.current", encoding="ascii") as f:
            used = int(f.read().strip())
        if cap != "max":
            found.append(max(0, int(cap) - used))
    except (OSError, ValueError):
        pass
    return min(found) if found else None


def _check_size(shapes: Mapping[str, Shape], tensors: Sequence[Tuple[str, Sequence[int]]], limit: int) -> None:
    """Refuse shapes MXNet cannot hold, or whose tensors cannot fit in memory.

    ``tensors`` are the model's arguments, aux states and outputs at these
    shapes, and its largest intermediate tensor: they exist at once in any
    bind, so their bytes are a lower bound of what a bind needs.

    Raises:
        UsageError: a tensor over ``limit`` elements, or more bytes than are available.
    """
    for name, shape in tensors:
        if shape and _elements(shape) > limit:
            raise UsageError(f"the shapes {shapes_text(shapes)} make {name} {tuple(shape)}: {_elements(shape):,} "
                             f"elements; MXNet handles at most {limit:,} per tensor")
    need = sum(_elements(s) for _, s in tensors if s) * _ITEM_BYTES
    have = available_memory()
    if have is not None and need > have:
        raise UsageError(f"the shapes {shapes_text(shapes)} need at least {_size(need)} for the model's inputs, "
                         f"weights, outputs and largest intermediate tensor; {_size(have)} of memory is available")


def _size(n: int) -> str:
    """``n`` bytes in the largest binary unit that keeps it >= 1 (``"1.5 GiB"``)."""
    value, unit = float(n), "bytes"
    for bigger in ("KiB", "MiB", "GiB", "TiB"):
        if value < 1024:
            break
        value, unit = value / 1024, bigger
    return f"{value:.1f} {unit}" if unit != "bytes" else f"{n} bytes"


def load_inputs(path: str, inputs: Sequence[str]) -> Dict[str, np.ndarray]:
    """Read ``--input``: a ``.npy`` for a single-input model, or a ``.npz`` keyed by input name.

    Raises:
        UsageError: missing or unreadable file, a ``.npy`` for several inputs,
            or a ``.npz`` lacking an input.
    """
    if not os.path.isfile(path):
        raise UsageError(f"--input {path}: no such file")
    try:
        loaded = np.load(path, allow_pickle=False)
    except Exception as exc:  # numpy raises several types for a bad file
        raise UsageError(f"--input {path}: cannot read: {exc}") from None
    if isinstance(loaded, np.ndarray):
        if len(inputs) != 1:
            raise UsageError(f"--input {path}: a .npy holds one array but the model has inputs {', '.join(inputs)}; "
                             "use a .npz keyed by input name")
        return {inputs[0]: loaded}
    with loaded as npz:
        arrays = {k: npz[k] for k in npz.files}
    missing = [n for n in inputs if n not in arrays]
    if missing:
        raise UsageError(f"--input {path}: no array for input {missing[0]!r} (it holds {', '.join(arrays) or 'nothing'})")
    return arrays


def random_inputs(shapes: Mapping[str, Shape], seed: int) -> Dict[str, np.ndarray]:
    """Seeded uniform [0, 1) float32 inputs, one generator for all in name order.

    Not negative: an input the model reads as token ids or lengths must stay in range (with negative
    valid lengths, MXNet's own forward of GluonNLP's BERT wrote outside its buffers).
    """
    rng = np.random.RandomState(seed)
    return {k: rng.uniform(0.0, 1.0, shapes[k]).astype("float32") for k in sorted(shapes)}


def load_model(args: argparse.Namespace, arrays_from: Optional[str] = None
               ) -> Tuple[Checkpoint, Dict[str, Shape], Optional[Dict[str, np.ndarray]]]:
    """The checkpoint, the input shapes and (with ``arrays_from``) the input arrays a command works on.

    Args:
        args: Parsed options: ``imports``, ``shape``, ``prefix``, ``epoch``.
        arrays_from: ``--input`` file, if any.

    Raises:
        UsageError: see :func:`import_user_module`, :func:`parse_shape`
            (and a repeated ``--shape``), :func:`load_checkpoint`,
            :func:`load_inputs` and :func:`resolve_shapes`.
    """
    for spec in args.imports:
        import_user_module(spec)
    if not args.prefix:
        raise UsageError("the following arguments are required: PREFIX")
    given: Dict[str, Shape] = {}
    for text in args.shape:
        name, shape = parse_shape(text)
        if name in given:
            raise UsageError(f"--shape {name} is given twice")
        given[name] = shape
    ckpt = load_checkpoint(args.prefix, args.epoch)
    arrays = load_inputs(arrays_from, ckpt.data_inputs()) if arrays_from else None
    shapes = resolve_shapes(ckpt, given, arrays)
    return ckpt, shapes, arrays
