"""Save an accelerated model to a folder and bind it again later without building any engine.

:func:`export_model` binds with the pass into a plan cache private to the
folder, then writes beside it the optimized symbol (fused nodes plus native
nodes), the parameters the native nodes still need, and a manifest naming the
cache entry of every fused node. :func:`load` reads them back, loads each
engine with its backend (integrity checked by the cache), and binds the
optimized symbol natively: no export, no engine build.

Folder layout::

    OUTDIR/mx_trt.json           manifest: format, backend and version, device, input shapes, engines
    OUTDIR/model-symbol.json     optimized symbol; fused nodes name their subgraph
    OUTDIR/model-0000.params     remaining weights (arg:/aux:), as mx.model.save_checkpoint writes
    OUTDIR/engines/              plan cache holding one verified entry per fused node

Engines are specific to the backend version and the device they were built
for (the manifest records both); :func:`load` refuses another backend and
reports the device or version difference when loading fails.
"""
from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple

from .errors import MxTrtError, ShapeError
from .settings import env_override

logger = logging.getLogger(__name__)

__all__ = ["FORMAT_VERSION", "LoadedModel", "export_model", "load"]

FORMAT_VERSION = 1
MANIFEST = "mx_trt.json"
SYMBOL_FILE = "model-symbol.json"
PARAMS_FILE = "model-0000.params"
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
        MxTrtError: a fused node names an engine missing from ``mapping``.
    """
    from .fused_op import ENGINE_ATTR, OP_TYPE

    doc = json.loads(sym_json)
    for node in doc["nodes"]:
        attrs = node.get("attrs") or {}
        if node.get("op") == "Custom" and attrs.get("op_type") == OP_TYPE:
            value = str(attrs.get(ENGINE_ATTR))
            if value not in mapping:
                raise MxTrtError(f"fused node {node.get('name')!r} names engine {value!r}, which is not in the export")
            attrs[ENGINE_ATTR] = mapping[value]
    return json.dumps(doc)


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
        overwrite: Replace an existing export in ``outdir``.

    Returns:
        The manifest written.

    Raises:
        MxTrtError: ``outdir`` holds something else, or an engine could not be
            stored (its backend cannot serialize engines).
    """
    import shutil

    import mxnet as mx

    from . import __version__, engines
    from .backends import select_backend
    from .bind import bind_with_backend
    from .cache import ENV_DIR, ENV_MAX_MB, EngineCache
    from .settings import Settings

    settings = settings or Settings.from_env()
    backend = backend or select_backend(ctx.device_type, settings.backend)
    outdir = os.path.abspath(outdir)
    if os.path.isdir(outdir) and os.listdir(outdir):
        if not overwrite:
            raise MxTrtError(f"{outdir} is not empty (overwrite it with --force)")
        if not os.path.isfile(os.path.join(outdir, MANIFEST)):
            raise MxTrtError(f"{outdir} is not empty and is not an mx_trt export: not overwriting it")
        shutil.rmtree(outdir)
    cache_dir = os.path.join(outdir, ENGINES_DIR)
    os.makedirs(cache_dir, exist_ok=True)
    # Engines kept in memory by earlier binds carry no stored artifacts: forget
    # them so that every subgraph is built into (and stored in) the private cache.
    engines.clear_pool()
    try:
        with env_override({ENV_DIR: cache_dir, ENV_MAX_MB: "0"}):
            exe, info = bind_with_backend(sym, ctx, backend, settings, dict(params), dict(shapes))
    finally:
        engines.clear_pool()
    cache = EngineCache(cache_dir, max_bytes=0)
    by_subgraph: Dict[str, Any] = {}
    for entry in sorted(cache.entries(), key=lambda e: e.last_used):
        by_subgraph[str(entry.meta.get("subgraph"))] = entry
    records = []
    mapping: Dict[str, str] = {}
    for fused in info.engines:
        found = by_subgraph.get(fused.name)
        if found is None:
            raise MxTrtError(f"the engine of {fused.name} was not stored: the {backend.name} backend cannot serialize "
                             "it, so it cannot be exported")
        mapping[fused.key] = fused.name
        records.append({"subgraph": fused.name, "key": found.key, "input_names": list(fused.input_names),
                        "output_names": list(fused.output_names)})
    with open(os.path.join(outdir, SYMBOL_FILE), "w", encoding="utf-8") as f:
        f.write(_rewrite_engine_attrs(info.symbol.tojson(), mapping))
    new_args = set(info.symbol.list_arguments()) - set(shapes)
    new_aux = set(info.symbol.list_auxiliary_states())
    saved = {}
    for name, value in params.items():
        arr = value if isinstance(value, mx.nd.NDArray) else mx.nd.array(value)
        if name in new_args:
            saved[f"arg:{name}"] = arr
        elif name in new_aux:
            saved[f"aux:{name}"] = arr
    mx.nd.save(os.path.join(outdir, PARAMS_FILE), saved)
    device_id = -1 if ctx.device_type == "cpu" else int(ctx.device_id)
    manifest = {
        "format": FORMAT_VERSION,
        "mx_trt": __version__,
        "backend": backend.name,
        "backend_version": backend.version(),
        "device_type": ctx.device_type,
        "device": backend.device_signature(device_id),
        "fp16": bool(settings.fp16),
        "inputs": {k: list(v) for k, v in shapes.items()},
        "symbol": SYMBOL_FILE,
        "params": PARAMS_FILE,
        "engines_dir": ENGINES_DIR,
        "engines": records,
        "native_failures": dict(info.native_failures),
    }
    with open(os.path.join(outdir, MANIFEST), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2)
    logger.info("exported %d engine(s) and %d params to %s", len(records), len(saved), outdir)
    del exe
    return manifest


def read_manifest(directory: str) -> Dict[str, Any]:
    """The manifest of an export.

    Raises:
        MxTrtError: missing, unreadable or of another format version.
    """
    path = os.path.join(directory, MANIFEST)
    try:
        with open(path, encoding="utf-8") as f:
            manifest = json.load(f)
    except FileNotFoundError:
        raise MxTrtError(f"{directory} is not an mx_trt export: no {MANIFEST}") from None
    except (OSError, ValueError) as exc:
        raise MxTrtError(f"cannot read {path}: {exc}") from None
    if manifest.get("format") != FORMAT_VERSION:
        raise MxTrtError(f"{path} has format {manifest.get('format')!r}; this mx_trt reads format {FORMAT_VERSION}")
    return dict(manifest)


def load(directory: str, ctx: Any = None, shapes: Optional[Mapping[str, Tuple[int, ...]]] = None) -> Any:
    """Bind an export made by :func:`export_model` (``mxtrt export``) without building engines (``mx_trt.load``).

    Args:
        directory: The export folder.
        ctx: The context (default ``mx.cpu()``); must be of the exported device type.
        shapes: Data input shapes; default the exported ones. Static engines
            accept only those; dynamic ones any batch inside their profiles.

    Returns:
        A bound executor (``grad_req='null'``), weights in place: set the data
        inputs and call ``forward(is_train=False)``.

    Raises:
        MxTrtError: not an export, another backend or device type, a missing
            or corrupt engine, or an engine the backend cannot load here.
        ShapeError: ``shapes`` do not fit the engines.
    """
    import mxnet as mx

    from .backends import BACKENDS, BuildOptions
    from .cache import EngineCache
    from .errors import BackendUnavailableError, EngineBuildError
    from .fused_op import register_engine
    from .hook import disabled

    directory = os.path.abspath(directory)
    manifest = read_manifest(directory)
    ctx = ctx or mx.cpu()
    if ctx.device_type != manifest["device_type"]:
        raise MxTrtError(f"{directory} holds {manifest['device_type']} engines; it cannot be bound on {ctx}")
    cls = BACKENDS.get(manifest["backend"])
    if cls is None:
        raise BackendUnavailableError(f"{directory} needs the {manifest['backend']} backend, which this build lacks")
    reason = cls.unavailable_reason()
    if reason:
        raise BackendUnavailableError(f"{directory} needs the {manifest['backend']} backend: {reason}")
    backend = cls()
    device_id = -1 if ctx.device_type == "cpu" else int(ctx.device_id)
    here = (backend.version(), backend.device_signature(device_id))
    then = (manifest.get("backend_version"), manifest.get("device"))
    cache = EngineCache(os.path.join(directory, manifest.get("engines_dir", ENGINES_DIR)), max_bytes=0)
    fused_engines = []
    mapping: Dict[str, str] = {}
    for rec in manifest["engines"]:
        name = rec["subgraph"]
        entry = cache.get(rec["key"])
        if entry is None:
            raise MxTrtError(f"{directory}: the engine of {name} is missing or corrupt (cache entry {rec['key'][:12]})")
        try:
            engine = backend.load(entry.meta.get("engine", {}), entry.directory,
                                  BuildOptions(device_id=device_id, fp16=bool(manifest.get("fp16")), name=name))
        except EngineBuildError as exc:
            hint = "" if here == then else f" (exported with {then[0]} on {then[1]}; this is {here[0]} on {here[1]})"
            raise MxTrtError(f"{directory}: {exc}{hint}") from exc
        fused = register_engine(name, engine, rec["input_names"], rec["output_names"])
        fused.source = "export"
        fused_engines.append(fused)
        mapping[name] = fused.key
    with open(os.path.join(directory, manifest["symbol"]), encoding="utf-8") as f:
        sym = mx.sym.load_json(_rewrite_engine_attrs(f.read(), mapping))
    saved = mx.nd.load(os.path.join(directory, manifest["params"]))
    if not isinstance(saved, dict):  # an empty dict is saved as an empty list
        saved = {}
    args = {k[4:]: v for k, v in saved.items() if k.startswith("arg:")}
    aux = {k[4:]: v for k, v in saved.items() if k.startswith("aux:")}
    bind_shapes = {k: tuple(v) for k, v in (shapes or manifest["inputs"]).items()}
    unknown = sorted(set(bind_shapes) - set(manifest["inputs"]))
    if unknown:
        raise ShapeError(f"{unknown} are not inputs of the export (inputs: {sorted(manifest['inputs'])})")
    with disabled():
        exe = sym.simple_bind(ctx, grad_req="null", shared_buffer=dict(args), **bind_shapes)
    exe.copy_params_from(args, aux, allow_extra_params=True)
    exe._mx_trt_loaded = LoadedModel(directory, manifest, fused_engines, sym)
    logger.info("loaded %s: %d engine(s), no build", directory, len(fused_engines))
    return exe
