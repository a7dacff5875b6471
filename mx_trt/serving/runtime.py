"""The Triton Inference Server that the serving extra brings, and the interpreter it embeds.

``pip install mx_trt[serve]`` installs ``nvidia-pytriton``, whose wheel holds a
``tritonserver`` binary (Triton 2.51), its Python backend and one Python
backend stub per Python version. mx_trt uses only those files; it never imports
``pytriton`` (nothing of it runs in the serving process).

The stub is the process in which a Python-backend model runs. It embeds
``libpython3.X.so.1.0``, found by the dynamic loader, and takes its standard
library and site-packages from the first ``python3`` on ``PATH``. Both must be
the serving interpreter's own: a library of another 3.X build (Debian's 3.11.2
under a pyenv 3.11.7 virtual environment) fails at model load with
``AttributeError: '_thread.RLock' object has no attribute '_recursion_count'``.
:func:`find_libpython` finds the running interpreter's own shared library (its
``sysconfig`` says where) and checks that it reports the same ``sys.version``; :func:`prepare`
links it into a private folder that goes first on the stub's
``LD_LIBRARY_PATH``. An interpreter without a shared library (built without
``--enable-shared``) cannot serve: :func:`serve_problem` says so in one line.
"""
from __future__ import annotations

import importlib.util
import logging
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from typing import Dict, List, Optional

from mx_trt.errors import ServeError
from mx_trt.settings import child_environment

logger = logging.getLogger(__name__)

#: The distribution that brings the server, as pip names it (``requirements/serve.txt``).
DISTRIBUTION = "nvidia-pytriton"


@dataclass(frozen=True)
class TritonDist:
    """Where the bundled server's files are.

    Attributes:
        root: ``.../site-packages/pytriton/tritonserver``.
        server: The ``tritonserver`` binary.
        backend: The Python backend folder (``libtriton_python.so`` and its utils).
        stub: The stub for this interpreter's Python version.
        libs: The folder of the wheel's bundled shared libraries.
    """

    root: str
    server: str
    backend: str
    stub: str
    libs: str


def find_dist() -> TritonDist:
    """The bundled server's files, found without importing ``pytriton``.

    Raises:
        ServeError: the serving extra is not installed, or lacks a file (named).
    """
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        raise ServeError(f"serving needs the serve extra ({DISTRIBUTION}): pip install 'mx_trt[serve]' "
                         "(or make venv with USE_SERVE=1)")
    package = list(spec.submodule_search_locations)[0]
    root = os.path.join(package, "tritonserver")
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    dist = TritonDist(root=root, server=os.path.join(root, "bin", "tritonserver"),
                      backend=os.path.join(root, "backends", "python"),
                      stub=os.path.join(root, "python_backend_stubs", version, "triton_python_backend_stub"),
                      libs=os.path.join(os.path.dirname(package), "nvidia_pytriton.libs"))
    for path in (dist.server, os.path.join(dist.backend, "libtriton_python.so"), dist.stub):
        if not os.path.isfile(path):
            raise ServeError(f"the {DISTRIBUTION} install lacks {path} (Python {version}); reinstall 'mx_trt[serve]'")
    return dist


#: Asks a shared libpython for its ``Py_GetVersion()`` (run in a child process: loading it is contained there).
_ASK_VERSION = ("import ctypes, sys; f = ctypes.CDLL(sys.argv[1]).Py_GetVersion; f.restype = ctypes.c_char_p; "
                "sys.stdout.write(f().decode())")


def library_version(path: str) -> Optional[str]:
    """``Py_GetVersion()`` of the shared library ``path`` (what ``sys.version`` is in an interpreter built with it),
    or ``None`` if it cannot be asked. Runs a child of this interpreter: about 50 ms."""
    try:
        out = subprocess.run([sys.executable, "-I", "-c", _ASK_VERSION, path], capture_output=True, text=True,
                             timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 and out.stdout else None


def find_libpython() -> str:
    """The running interpreter's own ``libpython3.X.so.1.0``: the library Triton's stub must load.

    It is the library in the interpreter's ``LIBDIR`` (or its multiarch
    folder) whose ``Py_GetVersion()`` equals this interpreter's ``sys.version``,
    build date and compiler included.

    Raises:
        ServeError: the interpreter has no shared library, or the one its
            ``sysconfig`` names is of another build.
    """
    soname = sysconfig.get_config_var("INSTSONAME") or f"libpython{sys.version_info[0]}.{sys.version_info[1]}.so.1.0"
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    multiarch = sysconfig.get_config_var("MULTIARCH") or ""
    candidates = [os.path.join(libdir, soname), os.path.join(libdir, multiarch, soname)]
    shared = bool(sysconfig.get_config_var("Py_ENABLE_SHARED"))
    found = [p for p in dict.fromkeys(candidates) if os.path.isfile(p)]
    versions = {p: library_version(p) for p in found}
    for path in found:
        if versions[path] == sys.version:
            return os.path.realpath(path)
    if found:
        why = f"{found[0]} is of another Python build (its version is {versions[found[0]]!r}, this one's {sys.version!r})"
    else:
        why = f"it has no shared library {soname}" + ("" if shared else " (it was built without --enable-shared)")
    raise ServeError(
        f"Triton's Python backend embeds {soname}, but this interpreter ({sys.executable}, Python "
        f"{platform.python_version()}, base {sys.base_prefix}) cannot provide its own: {why}. Make the virtual "
        "environment from an interpreter with its shared library, e.g. `make venv PYTHON=/usr/bin/python3.11` "
        "(Debian: apt install libpython3.11)")


def serve_problem() -> Optional[str]:
    """Why this process cannot serve (one line), or ``None``: the extra is installed and the interpreter fits."""
    try:
        find_dist()
        find_libpython()
    except ServeError as exc:
        return str(exc)
    return None


@dataclass(frozen=True)
class Runtime:
    """A server ready to launch: the command's binary, backend folder and environment.

    Attributes:
        server: The ``tritonserver`` binary.
        backend_dir: The ``--backend-directory`` (holds ``python/`` with the stub).
        env: The environment for the server and its stubs.
    """

    server: str
    backend_dir: str
    env: Dict[str, str]

    def command(self, repository: str, http_port: int, grpc_port: int, metrics_port: int,
                exit_timeout_s: int = 30, extra: Optional[List[str]] = None) -> List[str]:
        """The ``tritonserver`` command line for ``repository`` on these ports."""
        return [self.server, f"--model-repository={repository}", f"--backend-directory={self.backend_dir}",
                f"--http-port={http_port}", f"--grpc-port={grpc_port}", f"--metrics-port={metrics_port}",
                "--allow-gpu-metrics=false", "--strict-readiness=true", "--disable-auto-complete-config",
                f"--exit-timeout-secs={exit_timeout_s}", "--log-verbose=0", *(extra or [])]


def prepare(workdir: str, base_env: Optional[Dict[str, str]] = None) -> Runtime:
    """Lay out a backend folder under ``workdir`` and the environment that makes the stub embed this interpreter.

    ``workdir/backends/python`` gets the Python backend with this Python
    version's stub (copied: the backend looks for the stub beside itself), and
    ``workdir/libpython`` a link to :func:`find_libpython`'s library, first on
    ``LD_LIBRARY_PATH``; this interpreter's ``bin`` folder goes first on ``PATH``
    so that the stub finds the same site-packages.

    Raises:
        ServeError: see :func:`find_dist` and :func:`find_libpython`, or ``workdir`` cannot be written.
    """
    dist = find_dist()
    lib = find_libpython()
    backend_dir = os.path.join(workdir, "backends")
    python_dir = os.path.join(backend_dir, "python")
    lib_dir = os.path.join(workdir, "libpython")
    try:
        os.makedirs(python_dir, exist_ok=True)
        os.makedirs(lib_dir, exist_ok=True)
        for name in ("libtriton_python.so", "triton_python_backend_utils.py"):
            shutil.copyfile(os.path.join(dist.backend, name), os.path.join(python_dir, name))
        stub = os.path.join(python_dir, "triton_python_backend_stub")
        shutil.copyfile(dist.stub, stub)
        os.chmod(stub, 0o755)
        link = os.path.join(lib_dir, os.path.basename(sysconfig.get_config_var("INSTSONAME") or os.path.basename(lib)))
        if os.path.lexists(link):
            os.unlink(link)
        os.symlink(lib, link)
    except OSError as exc:
        raise ServeError(f"cannot lay out the Triton backend in {workdir}: {exc}") from exc
    env = child_environment(base=base_env)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (lib_dir, env.get("LD_LIBRARY_PATH", ""), dist.libs) if p)
    env["PATH"] = os.pathsep.join(p for p in (os.path.dirname(sys.executable), env.get("PATH", "")) if p)
    logger.debug("Triton runtime in %s: stub %s, libpython %s", workdir, dist.stub, lib)
    return Runtime(server=dist.server, backend_dir=backend_dir, env=env)
