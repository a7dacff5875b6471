"""Writing a Triton model repository for a checkpoint.

:func:`write_python_model` writes ``REPO/NAME/config.pbtxt`` and the version
folder ``REPO/NAME/1/`` (see :mod:`mx_trt.serving.spec`): a Python-backend
model whose instances bind the checkpoint with mx_trt. It serves any graph
MXNet binds, mixed ones included (native operators beside engines).

``config.pbtxt`` holds the names, dtypes and sample dims of the inputs and
outputs, ``max_batch_size``, ``dynamic_batching`` (``max_queue_delay_microseconds``)
and ``instance_group`` (count and kind).
"""
from __future__ import annotations

import json
import logging
import os
import re
import shutil
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence

from mx_trt.errors import ServeError
from mx_trt.serving.executors import TensorSpec, output_specs
from mx_trt.serving.spec import PARAMS_FILE, SYMBOL_FILE, ServeSpec, write_spec

logger = logging.getLogger(__name__)

#: numpy dtype name -> Triton's data type.
TRITON_TYPES = {
    "bool": "TYPE_BOOL", "uint8": "TYPE_UINT8", "int8": "TYPE_INT8", "int16": "TYPE_INT16", "int32": "TYPE_INT32",
    "int64": "TYPE_INT64", "float16": "TYPE_FP16", "float32": "TYPE_FP32", "float64": "TYPE_FP64",
}
_NAME = re.compile(r"[A-Za-z0-9_.-]+")

MODEL_PY = '''"""Triton Python-backend model written by mx_trt: binds model-symbol.json and model-0000.params with the pass."""
from mx_trt.serving.backend import TritonPythonModel  # noqa: F401
'''


#: Written last into every model folder mx_trt makes, listing its files: only such a folder is ever replaced.
MODEL_MARK = "mx_trt_model.json"


def _read_mark(folder: str, name: str) -> Optional[Dict[str, Any]]:
    """The folder's mark if it is really mx_trt's (a JSON object naming mx_trt, this model and its files), else ``None``."""
    try:
        with open(os.path.join(folder, MODEL_MARK), encoding="utf-8") as f:
            mark = json.load(f)
    except (OSError, ValueError, RecursionError):
        return None
    files = mark.get("files") if isinstance(mark, dict) else None
    if (not isinstance(mark, dict) or mark.get("writer") != "mx_trt" or mark.get("kind") != "triton-model"
            or mark.get("model") != name or not isinstance(files, list) or not all(isinstance(x, str) for x in files)):
        return None
    return mark


def _files_under(folder: str) -> List[str]:
    """Every non-directory under ``folder`` (symbolic links not followed), relative, sorted."""
    out: List[str] = []
    for root, dirs, files in os.walk(folder):
        links = [d for d in dirs if os.path.islink(os.path.join(root, d))]
        dirs[:] = [d for d in dirs if d not in links]
        out += [os.path.relpath(os.path.join(root, x), folder) for x in files + links]
    return sorted(out)


def replace_problem(folder: str, name: str) -> Optional[str]:
    """Why ``folder`` (an existing path) may not be replaced by the model ``name``, or ``None`` if mx_trt wrote it.

    It must be a real folder holding a valid :data:`MODEL_MARK` for ``name`` and no
    file that mark does not list (a file the user added afterwards is never deleted).
    """
    if os.path.islink(folder) or not os.path.isdir(folder):
        return "is not a folder mx_trt wrote"
    mark = _read_mark(folder, name)
    if mark is None:
        return f"was not written by mx_trt (no valid {MODEL_MARK} naming the model {name!r})"
    foreign = [x for x in _files_under(folder) if x != MODEL_MARK and x not in set(mark["files"])]
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        return f"holds files mx_trt did not write ({shown})"
    return None


def claim_model_dir(repo: str, name: str) -> str:
    """Make ``repo/name`` ready for a model mx_trt writes: created, or replacing one mx_trt wrote; returns it.

    Raises:
        ServeError: the path exists and is not mx_trt's (see :func:`replace_problem`), naming it.
        OSError: it cannot be removed or created.
    """
    folder = os.path.join(repo, check_model_name(name))
    if os.path.lexists(folder):
        problem = replace_problem(folder, name)
        if problem is not None:
            raise ServeError(f"{folder} {problem}: not replacing it (move it away, or write to another folder)")
        shutil.rmtree(folder)
    os.makedirs(os.path.join(folder, "1"))
    return folder


def mark_model_dir(folder: str) -> None:
    """Write :data:`MODEL_MARK` into a model folder mx_trt has just written, listing its files."""
    mark = {"writer": "mx_trt", "kind": "triton-model", "model": os.path.basename(folder),
            "files": [x for x in _files_under(folder) if x != MODEL_MARK]}
    with open(os.path.join(folder, MODEL_MARK), "w", encoding="utf-8") as f:
        json.dump(mark, f, indent=2)


def check_model_name(name: str) -> str:
    """``name`` if Triton accepts it as a model name (letters, digits, ``_ . -``).

    Raises:
        ServeError: otherwise.
    """
    if not _NAME.fullmatch(name or "") or name in (".", ".."):
        raise ServeError(f"model name {name!r}: use letters, digits, '_', '.' and '-' only")
    return name


def _tensors(kind: str, specs: Iterable[TensorSpec]) -> List[str]:
    lines = [f"{kind} ["]
    items = []
    for t in specs:
        if t.dtype not in TRITON_TYPES:
            raise ServeError(f"{kind} {t.name!r} has dtype {t.dtype}, which Triton does not carry")
        dims = ", ".join(str(d) for d in t.dims) if t.dims else "1"
        reshape = "" if t.dims else " reshape: { shape: [ ] }"
        items.append(f'  {{ name: "{t.name}" data_type: {TRITON_TYPES[t.dtype]} dims: [ {dims} ]{reshape} }}')
    lines.append(",\n".join(items))
    lines.append("]")
    return lines


def config_text(name: str, backend: str, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec], max_batch: int,
                max_queue_delay_us: int, instances: int, kind: str = "KIND_CPU", platform: Optional[str] = None,
                gpus: Optional[Sequence[int]] = None) -> str:
    """The ``config.pbtxt`` of one model (protobuf text format): ``platform``, ``backend`` or both.

    Raises:
        ServeError: a dtype Triton does not carry, or a bad count.
    """
    if instances < 1 or max_batch < 1 or max_queue_delay_us < 0:
        raise ServeError(f"instances ({instances}) and max_batch ({max_batch}) must be >= 1, "
                         f"max_queue_delay_us ({max_queue_delay_us}) >= 0")
    head = [f'name: "{check_model_name(name)}"']
    # With both, Triton checks that they agree (onnxruntime_onnx is the onnxruntime backend's platform).
    head += ([f'platform: "{platform}"'] if platform else []) + ([f'backend: "{backend}"'] if backend else [])
    head.append(f"max_batch_size: {max_batch}")
    group = f"  {{ count: {instances} kind: {kind}" + (f" gpus: [ {', '.join(map(str, gpus))} ]" if gpus else "") + " }"
    body = [*_tensors("input", inputs), *_tensors("output", outputs),
            f"dynamic_batching {{ max_queue_delay_microseconds: {max_queue_delay_us} }}",
            "instance_group [", group, "]"]
    return "\n".join(head + body) + "\n"


def write_python_model(repo: str, name: str, symbol: Any, arg_params: Mapping[str, Any], aux_params: Mapping[str, Any],
                       inputs: Sequence[TensorSpec], max_batch: int = 32, max_queue_delay_us: int = 2000,
                       instances: int = 1, kind: str = "KIND_CPU", accelerate: bool = True,
                       allow_nonfinite: bool = False, params_file: Optional[str] = None,
                       imports: Sequence[str] = ()) -> ServeSpec:
    """Write the Python-backend model ``repo/name`` for a checkpoint.

    Args:
        repo: The repository folder (created).
        name: The model name.
        symbol / arg_params / aux_params: The checkpoint.
        inputs: Data inputs with dtypes and sample dims.
        max_batch: ``max_batch_size``, and the engines' largest batch.
        max_queue_delay_us: How long the dynamic batcher waits to fill a batch.
        instances: Model instances (stub processes sharing the plan cache).
        kind: ``KIND_CPU`` or ``KIND_GPU``.
        accelerate: Bind with the pass (``False``: MXNet's own bind).
        allow_nonfinite: Let NaN and Inf inputs through.
        params_file: An existing ``.params`` file of this checkpoint to link instead of saving the weights again.
        imports: Modules that register the model's custom operators: ``.py`` files (copied into the folder
            as ``user_<name>.py``) or module names (importable where the server runs).

    Returns:
        The spec written.

    Raises:
        ServeError: a bad name or count, outputs that cannot be batched, the folder cannot be written,
            or ``repo/name`` exists and is not a model folder mx_trt wrote (it is never deleted).
    """
    import mxnet as mx

    check_model_name(name)
    outputs = output_specs(symbol, {**dict(arg_params), **dict(aux_params)}, inputs)
    text = config_text(name, "python", inputs, outputs, max_batch, max_queue_delay_us, instances, kind)
    copies = {p: f"user_{os.path.basename(p)}" for p in imports if p.endswith(".py")}
    spec = ServeSpec(list(inputs), outputs, max_batch, accelerate, allow_nonfinite,
                     [copies.get(p, p) for p in imports])
    try:
        model_dir = claim_model_dir(repo, name)
        version = os.path.join(model_dir, "1")
        with open(os.path.join(model_dir, "config.pbtxt"), "w", encoding="utf-8") as f:
            f.write(text)
        with open(os.path.join(version, "model.py"), "w", encoding="utf-8") as f:
            f.write(MODEL_PY)
        symbol.save(os.path.join(version, SYMBOL_FILE))
        if params_file is not None:
            os.symlink(os.path.abspath(params_file), os.path.join(version, PARAMS_FILE))
        else:
            saved = {f"arg:{k}": v for k, v in arg_params.items()}
            saved.update({f"aux:{k}": v for k, v in aux_params.items()})
            mx.nd.save(os.path.join(version, PARAMS_FILE), saved)
        for source, copy in copies.items():
            shutil.copyfile(source, os.path.join(version, copy))
        write_spec(version, spec)
        mark_model_dir(model_dir)
    except OSError as exc:
        raise ServeError(f"cannot write the model {name!r} into {repo}: {exc}") from exc
    logger.info("wrote the Triton model %s (python backend, max batch %d, %d instance(s))", model_dir, max_batch,
                instances)
    return spec
