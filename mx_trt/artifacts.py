"""Save an accelerated model to a folder and bind it again later without building any engine.

:func:`export_model` binds with the pass into a plan cache private to the
folder, then writes beside it the optimized symbol (fused nodes plus native
nodes), the parameters the native nodes still need, and a manifest naming the
cache entry of every fused node. :func:`load` reads them back, loads each
engine with its backend (integrity checked by the cache), and binds the
optimized symbol natively: no export, no engine build.

Folder layout::

    OUTDIR/mx_trt.json           manifest: format, backend and version, device, input shapes, engines,
                                 size and sha256 of the three files below
    OUTDIR/model-symbol.json     optimized symbol; fused nodes name their subgraph
    OUTDIR/model-0000.params     remaining weights (arg:/aux:), as mx.model.save_checkpoint writes
    OUTDIR/engines-0000.params   weights the stored engines are fed at load (``subgraph/initializer``);
                                 stored engines hold only what their backend derived from the weights
    OUTDIR/engines/              plan cache holding one verified entry per fused node

Engines are specific to the backend version and the device they were built
for (the manifest records both); :func:`load` refuses another backend and
reports the device or version difference when loading fails.

:func:`load` treats the folder as read-only: it writes, renames and removes
nothing there (no lock or temporary file either), opens only the file names
the layout above fixes (a manifest naming a path elsewhere is damaged), checks
every file's and every engine's size and sha256 first (a folder exported
before the manifest recorded its files skips that check for them), checks
that the parameters hold every weight the symbol needs, and reports every
problem as an
:class:`~mx_trt.errors.ExportError` naming the file, a
:class:`~mx_trt.errors.BackendUnavailableError` or a
:class:`~mx_trt.errors.ShapeError`.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import operator
import os
import re
import shutil
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from mx_trt._version import __version__
from mx_trt.builder.backends import Backend, BuildOptions, named_backend, select_backend
from mx_trt.pipeline.bind import bind
from mx_trt.pipeline.request import BindRequest
from mx_trt.cache import EngineCache
from mx_trt.cache.fs import remove_tree, stream_digest
from mx_trt.builder.engines import stored_engine_problem
from mx_trt.errors import BackendUnavailableError, CacheError, ExportError, MxTrtError, ShapeError
from mx_trt.runtime.forward import guard_forward
from mx_trt.runtime.fused_op import ENGINE_ATTR, OP_TYPE, register_engine
from mx_trt.frontends.hook import disabled, original_simple_bind
from mx_trt.settings import Settings, engine_options_from_env

logger = logging.getLogger(__name__)

__all__ = ["FORMAT_VERSION", "LoadedModel", "export_model", "load"]

FORMAT_VERSION = 2  # 2: engines-0000.params, weights fed to stored engines at load
_INT32_MAX = 2**31 - 1  # MXNet 1.9.1's largest dimension and element count
MANIFEST = "mx_trt.json"
SYMBOL_FILE = "model-symbol.json"
PARAMS_FILE = "model-0000.params"
ENGINE_WEIGHTS_FILE = "engines-0000.params"
ENGINES_DIR = "engines"


@dataclass
class LoadedModel:
    """What :func:`load` keeps on the executor (``executor._mx_trt_loaded``).

    Attributes:
        directory: The folder loaded.
        manifest: Its manifest.
        engines: The fused engines (the executor's fused nodes run them; this
            reference keeps them alive as long as the executor).
        symbol: The optimized symbol that was bound.
    """

    directory: str
    manifest: Dict[str, Any]
    engines: List[Any] = field(default_factory=list)
    symbol: Any = None


def _rewrite_engine_attrs(sym_json: str, mapping: Mapping[str, str]) -> str:
    """Replace the ``mx_trt_engine`` attribute of every fused node by ``mapping[value]``.

    Raises:
        ExportError: the JSON is not a symbol, or a fused node names an engine missing from ``mapping``.
    """
    try:
        doc = json.loads(sym_json)
        nodes = doc["nodes"]
        if not isinstance(nodes, list) or not all(isinstance(n, dict) for n in nodes):
            raise TypeError("'nodes' is not a list of objects")
    except (ValueError, KeyError, TypeError) as exc:
        raise ExportError(f"the symbol is not an MXNet symbol JSON ({type(exc).__name__}: {exc})") from None
    except RecursionError:
        raise ExportError("the symbol is not an MXNet symbol JSON (nested too deeply)") from None
    for node in nodes:
        attrs = node.get("attrs") or {}
        if node.get("op") == "Custom" and isinstance(attrs, dict) and attrs.get("op_type") == OP_TYPE:
            value = str(attrs.get(ENGINE_ATTR))
            if value not in mapping:
                raise ExportError(f"fused node {node.get('name')!r} names engine {value!r}, which is not in the export")
            attrs[ENGINE_ATTR] = mapping[value]
    return json.dumps(doc)


def _backend(name: str, directory: str) -> Backend:
    """The backend called ``name``, to build or load an export's engines in ``directory``.

    Raises:
        BackendUnavailableError: it is unknown to this build or cannot be used here.
    """
    return named_backend(name, f"{directory} needs the {name} backend, which this build lacks",
                         f"{directory} needs the {name} backend")


def export_model(
    sym: Any,
    ctx: Any,
    params: Mapping[str, Any],
    shapes: Mapping[str, Tuple[int, ...]],
    outdir: str,
    settings: Any = None,
    backend: Any = None,
    overwrite: bool = False,
) -> Dict[str, Any]:
    """Bind ``sym`` with the pass and write the result to ``outdir`` (see the module docstring).

    Args:
        sym: The symbol.
        ctx: The context the engines are for.
        params: Merged ``arg_params`` and ``aux_params``.
        shapes: Data input shapes.
        outdir: Target folder (created; must be empty unless ``overwrite``).
        settings: Bind settings (default: :meth:`Settings.from_env`).
        backend: Engine backend (default: the context's).
        overwrite: Replace an existing export in ``outdir``: only a folder holding a
            valid manifest and nothing but what that export wrote.

    Returns:
        The manifest written.

    Raises:
        ExportError: ``outdir`` holds something else (named; never deleted) or cannot be written, or
            an engine could not be stored (its backend cannot serialize engines).
    """
    import mxnet as mx

    settings = settings or Settings.from_env()
    backend = backend or select_backend(ctx.device_type, settings.backend)
    outdir = os.path.abspath(outdir)
    if os.path.isdir(outdir) and os.listdir(outdir):
        if not overwrite:
            raise ExportError(f"{outdir} is not empty (overwrite it with --force)")
        problem = _replace_problem(outdir)
        if problem is not None:
            raise ExportError(f"{outdir} {problem}: not overwriting it")
        shutil.rmtree(outdir)
    cache_dir = os.path.join(outdir, ENGINES_DIR)
    cache = EngineCache(cache_dir, max_bytes=0)
    problem = cache.probe()  # creates the folders; the bind would only warn and build in memory
    if problem is not None:
        raise ExportError(f"cannot write the export to {outdir}: {problem}")
    # The export's own cache travels with the request: binds in other threads keep theirs.
    # Engines kept in memory by earlier binds carry no stored artifacts: the export's bind
    # does not take them (reuse_engines=False), so every subgraph is built into, and
    # stored in, the private cache, whatever other threads bind meanwhile.
    private = dataclasses.replace(settings, cache_dir=cache_dir, cache_max_mb=0, cache_errors=())
    exe, info = bind(BindRequest(symbol=sym, shapes=shapes, params=dict(params), settings=private, backend=backend,
                                 ctx=ctx, native_bind=original_simple_bind(), reuse_engines=False))
    for scratch in ("locks", "tmp", "files"):  # the cache's working folders: not part of an export
        remove_tree(os.path.join(cache_dir, scratch))
    by_subgraph: Dict[str, Any] = {}
    for entry in sorted(cache.entries(), key=lambda e: e.last_used):
        by_subgraph[str(entry.meta.get("subgraph"))] = entry
    records = []
    mapping: Dict[str, str] = {}
    for fused in info.engines:
        found = by_subgraph.get(fused.name)
        if found is None:
            raise ExportError(f"the engine of {fused.name} was not stored in {cache_dir}: the {backend.name} backend "
                              "cannot serialize it, or writing failed (see the warnings above)")
        mapping[fused.key] = fused.name
        # The measured rule may keep another backend's engine (OpenVINO beside ONNX Runtime), or fp32 where a
        # reduced precision lost: each record names what built its engine.
        decision = info.decisions.get(fused.name)
        built_by, precision = decision.engine if decision is not None and decision.engine else (
            info.backend or backend.name, settings.precision)
        records.append({"subgraph": fused.name, "key": found.key, "input_names": list(fused.input_names),
                        "output_names": list(fused.output_names), "backend": built_by, "precision": precision,
                        "backend_version": _backend(built_by, outdir).version()})
    new_args = set(info.symbol.list_arguments()) - set(shapes)
    new_aux = set(info.symbol.list_auxiliary_states())
    saved = {}
    for name, value in params.items():
        arr = value if isinstance(value, mx.nd.NDArray) else mx.nd.array(value)
        if name in new_args:
            saved[f"arg:{name}"] = arr
        elif name in new_aux:
            saved[f"aux:{name}"] = arr
    fed = {f"{fused.name}/{k}": mx.nd.array(v, dtype=v.dtype)
           for fused in info.engines for k, v in fused.engine.stored_weights().items()}
    try:
        with open(os.path.join(outdir, SYMBOL_FILE), "w", encoding="utf-8") as f:
            f.write(_rewrite_engine_attrs(info.symbol.tojson(), mapping))
        mx.nd.save(os.path.join(outdir, PARAMS_FILE), saved)
        mx.nd.save(os.path.join(outdir, ENGINE_WEIGHTS_FILE), fed)
    except (OSError, mx.base.MXNetError) as exc:
        raise ExportError(f"cannot write the export to {outdir}: {exc}") from exc
    device_id = -1 if ctx.device_type == "cpu" else int(ctx.device_id)
    manifest = {
        "format": FORMAT_VERSION,
        "mx_trt": __version__,
        "backend": backend.name,
        "backend_version": backend.version(),
        "device_type": ctx.device_type,
        "device": backend.device_signature(device_id),
        "fp16": bool(settings.fp16),
        "precision": settings.precision,
        "inputs": {k: list(v) for k, v in shapes.items()},
        "symbol": SYMBOL_FILE,
        "params": PARAMS_FILE,
        "engine_weights": ENGINE_WEIGHTS_FILE,
        "engines_dir": ENGINES_DIR,
        "engines": records,
        "native_failures": dict(info.native_failures),
        "files": {name: _file_record(os.path.join(outdir, name)) for name in (SYMBOL_FILE, PARAMS_FILE,
                                                                             ENGINE_WEIGHTS_FILE)},
    }
    try:
        with open(os.path.join(outdir, MANIFEST), "w", encoding="utf-8") as f:
            json.dump(manifest, f, indent=2)
    except OSError as exc:
        raise ExportError(f"cannot write the export to {outdir}: {exc}") from exc
    logger.info("exported %d engine(s) and %d params to %s", len(records), len(saved), outdir)
    del exe
    return manifest


def _replace_problem(outdir: str) -> Optional[str]:
    """Why ``--force`` may not replace the folder ``outdir``, or ``None`` when it holds an mx_trt export and nothing else.

    A file merely named like the manifest is not enough: the manifest must be
    valid (:func:`read_manifest`), and every entry of the folder must be one the
    export wrote (the manifest, the files it names, the engines folder).
    """
    if os.path.islink(outdir):
        return "is a symbolic link, not an export folder"
    try:
        manifest = read_manifest(outdir)
    except ExportError as exc:
        return f"is not empty and is not an mx_trt export ({exc})"
    ours = {MANIFEST, *manifest.get("files", {})}
    ours |= {str(manifest[k]) for k in ("symbol", "params", "engine_weights", "engines_dir") if k in manifest}
    foreign = sorted(set(os.listdir(outdir)) - ours)
    engines_dir = os.path.join(outdir, str(manifest.get("engines_dir", ENGINES_DIR)))
    if os.path.islink(engines_dir) or (os.path.exists(engines_dir) and not os.path.isdir(engines_dir)):
        foreign.append(os.path.basename(engines_dir))
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        return f"holds files the mx_trt export did not write ({shown})"
    return None


def _file_record(path: str) -> Dict[str, Any]:
    """``{"size": bytes, "sha256": hex}`` of a file (written into the manifest, checked by :func:`load`)."""
    with open(path, "rb") as f:
        size, digest = stream_digest(f, "sha256")
    return {"size": size, "sha256": digest.split(":", 1)[1]}


def _check_files(directory: str, manifest: Mapping[str, Any]) -> None:
    """Check the size and sha256 of every file the manifest records (exports made before this check record none).

    Raises:
        ExportError: a file is missing, unreadable, or differs from the manifest (named in the message).
    """
    for name, want in sorted(manifest.get("files", {}).items()):
        path = os.path.join(directory, name)
        try:
            got = _file_record(path)
        except OSError as exc:
            raise ExportError(f"cannot read {path}: {exc.strerror or exc}; export the model again") from None
        if got != want:
            what = "size" if got["size"] != want["size"] else "sha256"
            raise ExportError(f"{path} is damaged: its {what} differs from the one {MANIFEST} records; export the "
                              "model again")


def _plain_name(value: Any) -> bool:
    """A single path component that stays inside the export folder."""
    return (isinstance(value, str) and bool(value) and "/" not in value and "\0" not in value
            and value not in (".", "..") and not value.startswith("."))


def _manifest_problem(manifest: Any) -> Optional[str]:
    """What makes a parsed manifest unusable, or ``None``."""
    if not isinstance(manifest, dict):
        return "it is not a JSON object"
    for k in ("backend", "device_type"):
        if not isinstance(manifest.get(k), str):
            return f"{k!r} is missing or not a string"
    for k in ("symbol", "params", "engine_weights", "engines_dir"):
        if k in manifest and not _plain_name(manifest[k]):
            return f"{k!r} is {manifest[k]!r}; expected a file name inside the export"
    inputs = manifest.get("inputs")
    if not isinstance(inputs, dict) or not all(
            isinstance(k, str) and isinstance(v, list) and all(type(d) is int and d >= 0 for d in v)
            for k, v in inputs.items()):
        return "'inputs' is not a map of input names to shapes"
    files = manifest.get("files", {})
    if not isinstance(files, dict) or not all(
            _plain_name(k) and isinstance(v, dict) and type(v.get("size")) is int
            and isinstance(v.get("sha256"), str) and re.fullmatch(r"[0-9a-f]{64}", v["sha256"])
            for k, v in files.items()):
        return "'files' is not a map of file names to their size and sha256"
    recs = manifest.get("engines")
    if not isinstance(recs, list):
        return "'engines' is not a list"
    for i, rec in enumerate(recs):
        ok = (isinstance(rec, dict) and isinstance(rec.get("subgraph"), str) and isinstance(rec.get("key"), str)
              and all(isinstance(rec.get(k), list) and all(isinstance(n, str) for n in rec[k])
                      for k in ("input_names", "output_names")))
        if not ok:
            return f"engine record {i} lacks a subgraph, key, input_names or output_names"
    return None


def read_manifest(directory: str) -> Dict[str, Any]:
    """The manifest of an export, checked.

    Raises:
        ExportError: missing, unreadable, malformed or of another format version.
    """
    path = os.path.join(directory, MANIFEST)
    try:
        with open(path, encoding="utf-8") as f:
            manifest = json.load(f)
    except FileNotFoundError:
        raise ExportError(f"{directory} is not an mx_trt export: no {MANIFEST}") from None
    except (OSError, ValueError) as exc:
        raise ExportError(f"cannot read {path}: {exc}") from None
    except RecursionError:
        raise ExportError(f"{path} is damaged: its JSON is nested too deeply") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_VERSION:
        fmt = manifest.get("format") if isinstance(manifest, dict) else None
        raise ExportError(f"{path} has format {fmt!r}; this mx_trt reads format {FORMAT_VERSION}")
    problem = _manifest_problem(manifest)
    if problem is not None:
        raise ExportError(f"{path} is damaged: {problem}")
    return dict(manifest)


def _read_engine_weights(path: str) -> Dict[str, Any]:
    """The weights stored engines are fed, by ``subgraph/initializer``, as numpy arrays.

    Raises:
        ExportError: the file is missing or unreadable.
    """
    import mxnet as mx

    try:
        saved = mx.nd.load(path)
    except (OSError, mx.base.MXNetError) as exc:
        raise ExportError(f"cannot read the engines' weights {path}: {_mx_line(exc)}") from None
    return {str(k): v.asnumpy() for k, v in _named_arrays(saved, path).items()}


def _mx_line(exc: BaseException) -> str:
    """The informative line of an MXNet (or OS) error: no C++ trace, timestamp or source position."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    picked = next((ln for ln in reversed(lines) if not ln.startswith(("File ", "Traceback", "Stack trace", "[bt]"))),
                  lines[0] if lines else type(exc).__name__)
    picked = re.sub(r"^(MXNetError: )+", "", picked)
    return re.sub(r"\[\d\d:\d\d:\d\d\] \S+:\d+: ", "", picked)


def _named_arrays(saved: Any, path: str) -> Dict[str, Any]:
    """What ``mx.nd.load`` read from an export's params file, as a dict.

    Raises:
        ExportError: the file holds a list of arrays (``mx.nd.save`` writes an empty dict as an empty list).
    """
    if isinstance(saved, dict):
        return saved
    if saved:
        raise ExportError(f"{path} is damaged: it holds a list of {len(saved)} arrays, not named ones")
    return {}


def _positive_dims(name: Any, value: Any) -> Tuple[int, ...]:
    """``value`` as a shape of positive ints MXNet can hold.

    Raises:
        ShapeError: not a sequence of integers, or a dimension below 1, over
            2**31 - 1, or more elements than that.
    """
    try:
        if isinstance(value, (str, bytes)) or any(isinstance(d, bool) for d in value):
            raise TypeError("not a sequence of integers")
        dims = tuple(operator.index(d) for d in value)
    except TypeError:
        raise ShapeError(f"shapes[{name!r}] is {value!r}; expected a tuple of positive ints") from None
    count = 1
    for d in dims:
        count *= d
    if not dims or min(dims) < 1 or max(dims) > _INT32_MAX or count > _INT32_MAX:
        raise ShapeError(f"shapes[{name!r}] is {dims}; expected a tuple of positive ints, each and their product "
                         f"at most {_INT32_MAX} (MXNet's limit)")
    return dims


def _bind_shapes(directory: str, manifest: Mapping[str, Any], shapes: Any) -> Dict[str, Tuple[int, ...]]:
    """The shapes to bind an export with: ``shapes`` checked, or the exported ones.

    Raises:
        ShapeError: ``shapes`` is not a mapping of input names to positive ints,
            names an unknown input, or (when the export holds engines) changes
            a rank or a dimension other than the batch.
    """
    exported = {k: tuple(v) for k, v in manifest["inputs"].items()}
    if shapes is None or (isinstance(shapes, Mapping) and not shapes):
        return exported
    if not isinstance(shapes, Mapping):
        raise ShapeError(f"shapes must be a dict of input names to tuples of ints, got {type(shapes).__name__}")
    out = {}
    for name, value in shapes.items():
        if not isinstance(name, str):
            raise ShapeError(f"shapes must be keyed by input name (a str), got {name!r}")
        out[name] = _positive_dims(name, value)
    unknown = sorted(set(out) - set(exported))
    if unknown:
        raise ShapeError(f"{unknown} are not inputs of the export (inputs: {sorted(exported)})")
    if manifest["engines"]:
        for name, dims in out.items():
            want = exported[name]
            if len(dims) != len(want) or dims[1:] != want[1:]:
                raise ShapeError(f"{directory}: its engines take {name} of shape {want} (only the batch, dimension 0, "
                                 f"may vary), got {dims}")
    return out


def _check_batch(directory: str, manifest: Mapping[str, Any], bind_shapes: Mapping[str, Tuple[int, ...]],
                 engines_: Sequence[Any]) -> None:
    """Raise :class:`ShapeError` unless every engine takes the batch of ``bind_shapes``."""
    exported = {k: tuple(v) for k, v in manifest["inputs"].items()}
    batches = {s[0] for s in bind_shapes.values()}
    if not engines_ or all(tuple(bind_shapes[k]) == exported[k] for k in bind_shapes) or len(batches) != 1:
        return  # the exported shapes are known to bind; inputs of several batches are MXNet's to judge
    b = batches.pop()
    for fused in engines_:
        eng = fused.engine
        if not eng.batch_ranges:
            raise ShapeError(f"{directory}: the engine of {fused.name} was built for batch "
                             f"{eng.inputs[0].shape[0] if eng.inputs and eng.inputs[0].shape else '?'} only, "
                             f"not {b} (export with --max-batch N for a dynamic batch)")
        if not eng.covers(b):
            raise ShapeError(f"{directory}: batch {b} is outside the profiles {eng.batch_ranges} (min, opt, max) "
                             f"of the engine of {fused.name}")


def load(directory: str, ctx: Any = None, shapes: Optional[Mapping[str, Tuple[int, ...]]] = None) -> Any:
    """Bind an export made by :func:`export_model` (``mxtrt export``) without building engines (``mx_trt.load``).

    The folder is only read (see the module docstring).

    Args:
        directory: The export folder.
        ctx: The context (default ``mx.cpu()``); must be of the exported device type.
        shapes: Data input shapes; default the exported ones. Static engines
            accept only those; dynamic ones any batch inside their profiles.

    Returns:
        A bound executor (``grad_req='null'``), weights in place: set the data
        inputs and call ``forward(is_train=False)``.

    Raises:
        ExportError: not an export, another device type, a missing, damaged or
            unreadable file (named in the message), or an engine the backend
            cannot load here.
        BackendUnavailableError: the export's backend is missing here.
        ShapeError: ``shapes`` is not a dict of input names to tuples of
            positive ints, or does not fit the engines.
    """
    import mxnet as mx

    try:
        directory = os.path.abspath(os.fspath(directory))
    except TypeError:
        raise ExportError(f"the export folder must be a path, got {directory!r}") from None
    manifest = read_manifest(directory)
    bind_shapes = _bind_shapes(directory, manifest, shapes)
    _check_files(directory, manifest)
    ctx = ctx or mx.cpu()
    if ctx.device_type != manifest["device_type"]:
        raise ExportError(f"{directory} holds {manifest['device_type']} engines; it cannot be bound on {ctx}")
    _backend(str(manifest["backend"]), directory)  # the bind's backend: what an engine record without its own names
    device_id = -1 if ctx.device_type == "cpu" else int(ctx.device_id)
    cache = EngineCache(os.path.join(directory, manifest.get("engines_dir", ENGINES_DIR)), max_bytes=0,
                        read_only=True)
    fed = _read_engine_weights(os.path.join(directory, manifest.get("engine_weights", ENGINE_WEIGHTS_FILE)))
    try:
        engine_options = engine_options_from_env()  # threads, workspace: this process's, not the export's
    except MxTrtError as exc:
        raise ExportError(f"{directory}: cannot load the engines: {exc}") from None
    fused_engines = []
    mapping: Dict[str, str] = {}
    for rec in manifest["engines"]:
        name = rec["subgraph"]
        # Exports before per-engine records: every engine is the manifest's backend's, in its precision.
        backend = _backend(str(rec.get("backend", manifest["backend"])), directory)
        here = (backend.version(), backend.device_signature(device_id))
        then = (rec.get("backend_version", manifest.get("backend_version")), manifest.get("device"))
        hint = "" if here == then else f" (exported with {then[0]} on {then[1]}; this is {here[0]} on {here[1]})"
        precision = rec.get("precision", manifest.get("precision"))
        try:
            entry = cache.inspect(rec["key"])
        except CacheError as exc:
            raise ExportError(f"{directory}: the engine of {name} is missing or corrupt: {exc}; export the model "
                              "again") from None
        if entry is None:
            raise ExportError(f"{directory}: the engine of {name} is missing or corrupt: no cache entry {rec['key']} "
                              f"in {cache.directory}; export the model again")
        problem = stored_engine_problem(entry)
        if problem is not None:
            raise ExportError(f"{directory}: the engine of {name} in {entry.directory} is missing or corrupt: "
                              f"{problem}")
        try:
            mine = {k[len(name) + 1:]: v for k, v in fed.items() if k.startswith(name + "/")}
            engine = backend.load(entry.meta["engine"], entry.directory,
                                  BuildOptions(device_id=device_id, fp16=precision == "fp16" or (
                                                   precision is None and bool(manifest.get("fp16"))),
                                               bf16=precision == "bf16", name=name,
                                               extra={**engine_options, "weights": lambda mine=mine: mine}))
        except Exception as exc:  # the backend's own errors, or metadata it cannot read
            raise ExportError(f"{directory}: cannot load the engine of {name} from {entry.directory}: {exc}{hint}") \
                from exc
        fused = register_engine(name, engine, rec["input_names"], rec["output_names"])
        fused.source = "export"
        fused_engines.append(fused)
        mapping[name] = fused.key
    sym_path = os.path.join(directory, manifest.get("symbol", SYMBOL_FILE))
    params_path = os.path.join(directory, manifest.get("params", PARAMS_FILE))
    try:
        with open(sym_path, encoding="utf-8") as f:
            sym = mx.sym.load_json(_rewrite_engine_attrs(f.read(), mapping))
    except (OSError, ValueError, mx.base.MXNetError, ExportError) as exc:
        raise ExportError(f"cannot read the symbol {sym_path}: {_mx_line(exc)}") from None
    try:
        saved = _named_arrays(mx.nd.load(params_path), params_path)
    except (OSError, mx.base.MXNetError) as exc:
        raise ExportError(f"cannot read the parameters {params_path}: {_mx_line(exc)}") from None
    args = {k[4:]: v for k, v in saved.items() if k.startswith("arg:")}
    aux = {k[4:]: v for k, v in saved.items() if k.startswith("aux:")}
    lacking = [n for n in sym.list_arguments() if n not in args and n not in manifest["inputs"]]
    lacking += [n for n in sym.list_auxiliary_states() if n not in aux]
    if lacking:  # MXNet would bind them as zeros: a silent wrong output
        raise ExportError(f"{params_path} lacks {', '.join(lacking[:5])}{', ...' if len(lacking) > 5 else ''}, "
                          "which the symbol needs; export the model again")
    _check_batch(directory, manifest, bind_shapes, fused_engines)
    try:
        with disabled():
            exe = sym.simple_bind(ctx, grad_req="null", shared_buffer=dict(args), **bind_shapes)
        exe.copy_params_from(args, aux, allow_extra_params=True)
    except (mx.base.MXNetError, ValueError, KeyError, TypeError, RuntimeError, OverflowError) as exc:
        first = _mx_line(exc)
        if shapes:
            raise ShapeError(f"{directory}: cannot bind with shapes {bind_shapes}: {first}") from None
        raise ExportError(f"{directory}: the symbol and parameters do not bind ({first}); export the model again") \
            from None
    exe._mx_trt_loaded = LoadedModel(directory, manifest, fused_engines, sym)
    guard_forward(exe, fused_engines)
    logger.info("loaded %s: %d engine(s), no build", directory, len(fused_engines))
    return exe
