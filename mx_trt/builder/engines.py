"""Getting an engine for a subgraph: reuse one in this process, load one from the plan cache, or build one.

The cache key is a sha256 over everything an engine depends on: the canonical
subgraph (node names, ops, attributes, wiring), the shapes and dtypes at its
boundary, the digest of every weight baked into it, the precision, the batch
profiles, the backend and its version, the device (compute capability, or CPU
model for ONNX Runtime's optimized models), and a fingerprint of mx_trt's own
converter, export and backend code. A changed weight, shape, precision, library or device never reuses
a stale engine.

Lookup order for one subgraph:

1. this process's pool: an engine for the same subgraph whose batch profile
   covers the bound batch (a rebind within ``MXNET_TENSORRT_MAX_BATCH_SIZE``
   builds nothing);
2. the plan cache on disk (the bind's ``Settings.cache_dir``), under a per-key file
   lock so that processes binding the same model at once build it once;
3. export and build (temporary files under the cache's ``tmp/``), then store in both.

A cache that cannot be used costs one warning, never an engine; a stored
engine that cannot be loaded is removed and rebuilt.
"""
from __future__ import annotations

import functools
import hashlib
import logging
import os
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from mx_trt.passes.ir import BatchRange, Entry, Graph
from mx_trt.passes.naming import entry_name

from mx_trt._version import __version__
from mx_trt.builder.backends.base import Backend, BuildOptions, Engine
from mx_trt.cache import make_key, sweep_orphans
from mx_trt.errors import CacheError, EngineBuildError
from mx_trt.export.converters import user_fingerprint
from mx_trt.export.subgraph import ExportedSubgraph

logger = logging.getLogger(__name__)

KEY_FORMAT = 3  # 2: weight digests are xxh3-128 with dtype and shape; ORT entries hold no weights;
#                3: the plan-cache key is made over the pool key


@functools.lru_cache(maxsize=1)
def converter_fingerprint() -> str:
    """sha256 of the code that decides what an exported subgraph and its engine look like."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    files = [os.path.join(package, "builder", "profiles.py")]
    for sub in (("export",), ("builder", "backends")):
        top = os.path.join(package, *sub)
        for root, dirs, names in os.walk(top):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            files += sorted(os.path.join(root, f) for f in names if f.endswith(".py"))
    h = hashlib.sha256(__version__.encode())
    for f in files:
        with open(f, "rb") as fh:
            h.update(fh.read())
    return h.hexdigest()


@dataclass
class SubgraphJob:
    """What is needed to get an engine for one subgraph.

    Attributes:
        name: Subgraph name.
        graph: The whole graph (bound shapes).
        nodes: The subgraph's operator nodes.
        inputs / outputs: Boundary entries.
        weight_digests: Digest (:func:`mx_trt.pipeline.weights.digest`) per weight name consumed inside.
        fp16: Precision (fp16 or not).
        precision: ``fp32``, ``fp16``, ``bf16`` or ``int8`` (empty: from ``fp16``).
        calibration: For int8, a digest of the calibration table and the exclusions (in the cache key).
        batch_ranges: Requested batch profiles, empty for static.
        export: Callable producing the exported subgraph (bound shapes, batch
            dimension symbolic when ``batch_ranges`` and the export allows it).
        initializers: Callable giving every initializer of that model by name
            (views over the caller's weights where used as is): what a stored
            engine without its weights is fed at load (``BuildOptions.extra["weights"]``).
        weight_views: Callable giving, for the names asked that are the caller's
            weights, views over them (no export; ``BuildOptions.extra["weight_views"]``):
            how a warm load feeds an engine whose fed weights are all used as they are.
    """

    name: str
    graph: Graph
    nodes: Sequence[int]
    inputs: Sequence[Entry]
    outputs: Sequence[Entry]
    weight_digests: Mapping[str, str]
    fp16: bool
    batch_ranges: Sequence[BatchRange]
    export: Callable[[], ExportedSubgraph]
    initializers: Optional[Callable[[], Dict[str, Any]]] = None
    weight_views: Optional[Callable[[Sequence[str]], Dict[str, Any]]] = None
    precision: str = ""
    calibration: str = ""

    def canonical(self, batch_symbolic: bool) -> Dict[str, Any]:
        g = self.graph
        members = set(self.nodes)
        local = {nid: i for i, nid in enumerate(sorted(members))}
        ins = {e: k for k, e in enumerate(self.inputs)}

        def ref(e: Entry) -> Any:
            if e.node in local:
                return ["n", local[e.node], e.index]
            if e in ins:
                return ["in", ins[e]]
            return ["w", g.nodes[e.node].name, self.weight_digests.get(g.nodes[e.node].name, "")]

        def shape(e: Entry) -> List[Any]:
            s: List[Any] = list(g.shapes[e])
            if batch_symbolic and s:
                s[0] = "batch"
            return s

        return {
            "nodes": [[g.nodes[n].name, g.nodes[n].op, sorted(g.nodes[n].attrs.items()), [ref(e) for e in g.nodes[n].inputs]]
                      for n in sorted(members)],
            "inputs": [[entry_name(g, e), shape(e), g.dtypes.get(e, "float32")] for e in self.inputs],
            "outputs": [[entry_name(g, e), shape(e), g.dtypes.get(e, "float32")] for e in self.outputs],
        }


def stored_engine_problem(entry: Any) -> Optional[str]:
    """Why a verified cache entry cannot hold a stored engine, or ``None``.

    Its metadata must have an ``engine`` dict, and every value it names a file
    with (keys ``file`` and ``*_file``) must be one of the entry's own checked
    files: a backend never opens a path taken from metadata.
    """
    engine = entry.meta.get("engine")
    if not isinstance(engine, dict) or not engine:
        return "its metadata has no engine description"
    return _named_files_problem(engine, entry.files, "")


def _named_files_problem(engine: Mapping[str, Any], files: Any, prefix: str) -> Optional[str]:
    """Why the files ``engine`` names (``prefix`` + the name: a chained engine's parts store theirs as
    ``head.<file>``, ``tail.<file>``) are not all among ``files``, or ``None``."""
    for k, v in engine.items():
        if k == "file" or k.endswith("_file"):
            if not isinstance(v, str) or prefix + v not in files:
                return f"its metadata names {k}={v!r}, which is not one of its files {sorted(files)}"
    parts, listed = engine.get("parts"), engine.get("files")
    if parts is None:
        return None
    if not isinstance(parts, dict) or not isinstance(listed, dict):
        return "its metadata describes parts without their files"
    for label, part in parts.items():
        names = listed.get(label)
        if not isinstance(part, dict) or not isinstance(names, list):
            return f"its metadata describes part {label!r} without its files"
        missing = [n for n in names if not isinstance(n, str) or f"{prefix}{label}.{n}" not in files]
        if missing:
            return f"its part {label!r} names files {missing} that are not among its files {sorted(files)}"
        problem = _named_files_problem(part, files, f"{prefix}{label}.")
        if problem is not None:
            return problem
    return None


_orphans_swept = False


def _sweep_orphans_once() -> None:
    """Remove, once per process, work folders that dead processes left in the system temporary folder."""
    global _orphans_swept
    if not _orphans_swept:
        _orphans_swept = True
        sweep_orphans()


#: Pool key -> weak references to the engines built or loaded for it in this process. The
#: pool never keeps an engine alive: an engine that no executor (nor a pinned symbol) uses
#: goes, and its key with it (:func:`_forget`), so a long-running process holds no key per
#: subgraph it has ever bound.
_pool: Dict[str, List["weakref.ref[Engine]"]] = {}
_pool_lock = threading.Lock()
#: (key, reference) of engines that died while ``_pool_lock`` was held; removed at the next lock.
_dead: List[Tuple[str, "weakref.ref[Engine]"]] = []


def _drop(key: str, ref: "weakref.ref[Engine]") -> None:
    """Remove one dead reference, and its key once empty (``_pool_lock`` held)."""
    refs = _pool.get(key)
    if refs is None:
        return
    refs[:] = [r for r in refs if r is not ref and r() is not None]
    if not refs:
        del _pool[key]


def _prune_dead() -> None:
    """Apply the removals deferred by :func:`_forget` (``_pool_lock`` held)."""
    while _dead:
        _drop(*_dead.pop())


def _forget(key: str) -> Callable[["weakref.ref[Engine]"], None]:
    """The weak-reference callback that removes a dead engine (and its emptied key) from the pool.

    It may run in any thread, also while this thread holds ``_pool_lock`` (a
    garbage collection inside a locked block): then it only records the removal,
    done at the next acquisition of the lock.
    """
    def callback(ref: "weakref.ref[Engine]") -> None:
        if _pool_lock.acquire(blocking=False):
            try:
                _prune_dead()
                _drop(key, ref)
            finally:
                _pool_lock.release()
        else:
            _dead.append((key, ref))  # list.append is atomic

    return callback


def clear_pool() -> None:
    """Forget the engines kept for reuse in this process (engines in use stay alive)."""
    with _pool_lock:
        _pool.clear()
        _dead.clear()


def pool_size() -> Tuple[int, int]:
    """(keys, live engines) in this process's pool: both fall back as executors are freed."""
    with _pool_lock:
        _prune_dead()
        return len(_pool), sum(1 for refs in _pool.values() for r in refs if r() is not None)


class EngineProvider:
    """Finds or builds engines for one bind (backend, device, cache).

    The plan cache is an optimization, never a condition: at the first lookup
    :meth:`~mx_trt.cache.EngineCache.probe` checks it; an unusable one is
    reported with one warning naming the folder and the reason, after which
    engines are built in memory (a cache that can be read but not written
    still serves the engines it holds).

    ``options`` are the bind's engine options
    (:meth:`~mx_trt.settings.Settings.engine_options`: threads, workspace, ...),
    given to every build and load as ``BuildOptions.extra`` keys. With
    ``reuse=False`` the engines of earlier binds (the pool) are not looked at.
    """

    def __init__(self, backend: Backend, device_id: int, cache: Any = None,
                 progress: Optional[Callable[[str, int, int], None]] = None,
                 options: Optional[Mapping[str, Any]] = None, reuse: bool = True) -> None:
        self.backend = backend
        self.reuse = reuse
        self.device_id = device_id
        self.options = dict(options or {})
        self.cache = cache
        self.progress = progress
        self.builds = 0
        self.loads = 0
        self.reuses = 0
        self.stored = 0
        self._cache_checked = False
        self._recent: List[Tuple[SubgraphJob, Tuple[str, str]]] = []
        _sweep_orphans_once()

    def _usable_cache(self) -> Any:
        """The cache after checking it once: itself, a read-only view of it, or ``None``."""
        if self.cache is None or self._cache_checked:
            return self.cache
        self._cache_checked = True
        problem = self.cache.probe()
        if problem is None:
            return self.cache
        if self.cache.readable():
            logger.warning("plan cache %s cannot be written (%s): engines stored there are used, new ones are built "
                           "in memory and not stored", self.cache.directory, problem)
            self.cache = self.cache.read_only_view()
        else:
            logger.warning("plan cache %s cannot be used (%s): engines are built in memory and not stored",
                           self.cache.directory, problem)
            self.cache = None
        return self.cache

    def _keys(self, job: SubgraphJob) -> Tuple[str, str]:
        """(pool key, plan-cache key). The pool key leaves out the bound batch and the
        profiles, so an engine whose profile covers a new bind is found; the plan-cache
        key is exact. The last few jobs' keys are remembered (the measured rule asks twice)."""
        for seen, keys in self._recent:
            if seen is job:
                return keys
        keys = self._make_keys(job)
        self._recent = [(job, keys), *self._recent[:3]]
        return keys

    def _make_keys(self, job: SubgraphJob) -> Tuple[str, str]:
        parts: Dict[str, Any] = {
            "format": KEY_FORMAT,
            "converters": converter_fingerprint(),
            "subgraph": job.canonical(batch_symbolic=bool(job.batch_ranges)),
            "precision": job.precision or ("fp16" if job.fp16 else "fp32"),
            "backend": self.backend.version(),
            "device": self.backend.device_signature(self.device_id),
        }
        if job.calibration:
            parts["calibration"] = job.calibration
        users = user_fingerprint((job.graph.nodes[n].op, job.graph.nodes[n].attrs) for n in job.nodes)
        if users:  # the user converters it uses: their identity, version and code
            parts["user_converters"] = users
        pool_key = make_key(parts)  # O(subgraph size), once: the exact key builds on it
        bound = [tuple(job.graph.shapes[e]) for e in job.inputs]
        exact = {"format": KEY_FORMAT, "pool_key": pool_key, "bound": [list(s) for s in bound],
                 "batch_ranges": [list(r) for r in job.batch_ranges]}
        layout = self.backend.layout_for(bound, bool(job.batch_ranges))
        if layout:  # e.g. OpenVINO's chunks of the batch, chosen for this process's CPUs
            exact["layout"] = layout
        return pool_key, make_key(exact)

    def cache_key(self, job: SubgraphJob) -> str:
        """The plan-cache key of ``job``'s engine with this provider's backend and device."""
        return self._keys(job)[1]

    def get(self, job: SubgraphJob, store: bool = True) -> Tuple[Engine, str]:
        """An engine for ``job`` and where it came from (``memory``, ``disk``, ``built``).

        ``store=False``: an engine that must be built is built in memory and not
        stored (a candidate the measured rule may drop); :meth:`store` stores it
        once chosen.

        Raises:
            EngineBuildError, ConversionError, MissingWeightError: the build failed.
        """
        batch = job.graph.shapes[job.inputs[0]][0] if job.inputs and job.graph.shapes[job.inputs[0]] else None
        pool_key, key = self._keys(job)
        with _pool_lock:
            _prune_dead()
            for ref in list(_pool.get(pool_key, ()) if self.reuse else ()):
                eng = ref()
                if eng is not None and batch is not None and eng.covers(batch) and (job.batch_ranges or not eng.batch_ranges):
                    self.reuses += 1
                    logger.info("%s: reusing an engine built earlier in this process (profiles %s)", job.name,
                                eng.batch_ranges or "static")
                    return eng, "memory"
        opts = self._options(job)
        cache = self._usable_cache()
        if cache is None:
            eng = self._build(job, opts)
            source = "built"
        elif not store:
            eng, source = self._from_cache_or_build(cache, job, key, opts, store=False)
        else:
            with cache.lock(key):
                eng, source = self._from_cache_or_build(cache, job, key, opts)
        self._pool_add(pool_key, eng)
        return eng, source

    def store(self, job: SubgraphJob, eng: Engine) -> Engine:
        """Store ``eng``, built by ``get(job, store=False)``; returns the engine to run.

        The engine saves itself into the plan cache where its backend can do that
        from memory (OpenVINO, TensorRT). A backend that stores only what it wrote
        while building (ONNX Runtime's optimized model) builds its stored form
        once more, and that engine is returned. Nothing is stored without a
        writable cache, or when another process stored the engine meanwhile.
        """
        cache = self._usable_cache()
        if cache is None or cache.read_only:
            return eng
        pool_key, key = self._keys(job)
        opts = self._options(job)
        with cache.lock(key):
            if cache.get(key) is not None:
                return eng
            try:
                with cache.work_dir() as work_path:
                    if self._store(cache, eng, job, key, os.path.join(work_path, "engine")) != "unsupported":
                        return eng
            except OSError as exc:
                logger.warning("%s: cannot stage the engine in the plan cache %s (%s); not stored", job.name,
                               cache.directory, exc)
                return eng
            logger.info("%s: building the engine again to store it", job.name)
            stored, _ = self._from_cache_or_build(cache, job, key, opts)
        self._pool_add(pool_key, stored)
        return stored

    def _options(self, job: SubgraphJob) -> BuildOptions:
        opts = BuildOptions(device_id=self.device_id, fp16=job.fp16, bf16=job.precision == "bf16", name=job.name,
                            extra={**self.options, "batch_ranges": list(job.batch_ranges)})
        if self.progress is not None:
            opts.extra["progress"] = self.progress
        if job.precision == "int8":
            opts.extra["int8"] = True  # explicit Q/DQ: weakly typed TensorRT networks need the INT8 flag
        if job.initializers is not None:
            opts.extra["weights"] = job.initializers
        if job.weight_views is not None:
            opts.extra["weight_views"] = job.weight_views
        return opts

    @staticmethod
    def _pool_add(pool_key: str, eng: Engine) -> None:
        ref = weakref.ref(eng, _forget(pool_key))
        with _pool_lock:
            _prune_dead()
            _pool.setdefault(pool_key, []).append(ref)

    def _side_caches(self, cache: Any, job: SubgraphJob, opts: BuildOptions) -> None:
        """TensorRT's timing cache and TensorRT-RTX's runtime cache live beside the plans."""
        tag = f"{self.backend.version()}-{self._device_tag()}"
        try:
            opts.extra["timing_cache_path"] = cache.path(f"timing/{tag}.cache")
            opts.extra["runtime_cache_path"] = cache.path(f"runtime/{tag}.cache")
        except CacheError as exc:
            logger.debug("%s: no timing or runtime cache: %s", job.name, exc)

    def _from_cache_or_build(self, cache: Any, job: SubgraphJob, key: str, opts: BuildOptions,
                             store: bool = True) -> Tuple[Engine, str]:
        """A stored engine, else one built (and stored, unless ``store`` is off or the cache read-only)."""
        if not cache.read_only:
            self._side_caches(cache, job, opts)
        entry = cache.get(key)
        if entry is not None:
            eng = self._load_stored(cache, entry, job, opts)
            if eng is not None:
                return eng, "disk"
        if cache.read_only or not store:
            return self._build(job, opts), "built"
        try:
            work = cache.work_dir()
        except OSError as exc:
            logger.warning("%s: cannot stage the engine in the plan cache %s (%s); built in memory, not stored",
                           job.name, cache.directory, exc)
            return self._build(job, opts), "built"
        with work as work_path:
            # The backend's temporary files go under the cache's tmp/: removed with
            # this folder, or swept by the next process if this one dies meanwhile.
            opts.extra["keep_artifacts"] = True
            opts.extra["work_dir"] = work_path
            eng = self._build(job, opts)
            self._store(cache, eng, job, key, os.path.join(work_path, "engine"))
        return eng, "built"

    def _load_stored(self, cache: Any, entry: Any, job: SubgraphJob, opts: BuildOptions) -> Optional[Engine]:
        """The engine of a verified entry, or ``None`` (warned; the entry is removed so a rebuild replaces it)."""
        problem = stored_engine_problem(entry)
        if problem is None:
            try:
                eng = self.backend.load(entry.meta["engine"], entry.directory, opts)
            except EngineBuildError as exc:
                problem = str(exc)
            except Exception as exc:  # a malformed entry must cost a rebuild, never the bind
                problem = f"{type(exc).__name__}: {exc}"
            else:
                self.loads += 1
                logger.info("%s: engine loaded from the plan cache (%s)", job.name, entry.key[:12])
                return eng
        action = "skipped" if cache.read_only else "removed"
        logger.warning("%s: stored engine %s in %s cannot be used (%s); %s, rebuilding", job.name, entry.key[:12],
                       entry.directory, problem, action)
        cache.discard(entry.key)
        return None

    def _store(self, cache: Any, eng: Engine, job: SubgraphJob, key: str, folder: str) -> str:
        """Save ``eng`` into ``folder`` and move its files into the cache; failures only log.

        Returns ``stored``, ``unsupported`` (the engine cannot save itself) or ``failed``.
        """
        try:
            os.mkdir(folder)
            meta = eng.save(folder)
            files = {f: os.path.join(folder, f) for f in os.listdir(folder)}
            cache.put(key, {"engine": meta, "subgraph": job.name}, files, move=True)
            self.stored += 1
            return "stored"
        except NotImplementedError as exc:
            logger.debug("%s: engine not cached: %s", job.name, exc)
            return "unsupported"
        except CacheError:
            return "failed"  # put() has logged why; the engine is used without being stored
        except OSError as exc:
            logger.warning("%s: could not store the engine in the plan cache: %s", job.name, exc)
            return "failed"

    def _device_tag(self) -> str:
        return hashlib.sha256(self.backend.device_signature(self.device_id).encode()).hexdigest()[:12]

    def _build(self, job: SubgraphJob, opts: BuildOptions) -> Engine:
        exported = job.export()
        self.builds += 1
        return self.backend.build(exported, opts)
