"""A minimal ctypes binding of the CUDA runtime (libcudart) for the TensorRT backends.

Only what running an engine needs: devices, streams, synchronization, and
``memcpy``/``malloc`` for tests. The library is loaded on first use, so that
importing mx_trt never needs CUDA; every failure is a typed error that says
what is missing.

Where the library comes from, first match wins:

1. ``MXNET_TENSORRT_CUDART``: a path to ``libcudart.so``;
2. a ``libcudart`` already loaded in this process (by MXNet or TensorRT), so
   that all of them share one runtime;
3. the ``nvidia-cuda-runtime-cu*`` wheels' folders;
4. the dynamic loader's search path (``libcudart.so``, ``.so.13``, ``.so.12``, ``.so.11.0``).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import glob
import logging
import os
import sys
import threading
from typing import List, Optional, Tuple

from mx_trt.errors import BackendUnavailableError, EngineRunError
from mx_trt.settings import cudart_path

logger = logging.getLogger(__name__)

#: cudaDeviceAttr values (driver_types.h).
_ATTR_CC_MAJOR = 75
_ATTR_CC_MINOR = 76
#: cudaMemcpyKind.
HOST_TO_DEVICE = 1
DEVICE_TO_HOST = 2
DEVICE_TO_DEVICE = 3
#: cudaStreamNonBlocking: the stream does not synchronize with the legacy default stream.
_STREAM_NON_BLOCKING = 0x1

_SONAMES = ("libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0")


class CudaError(EngineRunError):
    """A CUDA runtime call failed.

    Attributes:
        code: The ``cudaError_t`` value.
    """

    def __init__(self, message: str, code: int = -1) -> None:
        super().__init__(message)
        self.code = code


_lib: Optional[ctypes.CDLL] = None
_load_error: Optional[str] = None
_lock = threading.Lock()


def _loaded_in_process() -> List[str]:
    """Paths of libcudart copies already mapped into this process (Linux)."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            paths = {line.split()[-1] for line in f if "libcudart" in line}
    except OSError:
        return []
    return sorted(p for p in paths if os.path.isabs(p))


def _wheel_copies() -> List[str]:
    """libcudart from the ``nvidia-cuda-runtime-cu*`` wheels, newest major first."""
    out: List[str] = []
    for base in sys.path:
        folder = os.path.join(base, "nvidia", "cuda_runtime", "lib")
        if os.path.isdir(folder):
            out.extend(sorted(glob.glob(os.path.join(folder, "libcudart.so*")), reverse=True))
    return out


def candidates() -> List[str]:
    """Where :func:`library` looks for libcudart, in order."""
    out: List[str] = []
    given = cudart_path()
    if given:
        out.append(given)
    out.extend(_loaded_in_process())
    out.extend(_wheel_copies())
    found = ctypes.util.find_library("cudart")
    if found:
        out.append(found)
    out.extend(_SONAMES)
    return list(dict.fromkeys(out))


def library() -> ctypes.CDLL:
    """The loaded CUDA runtime.

    Raises:
        BackendUnavailableError: no libcudart could be loaded.
    """
    global _lib, _load_error
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        if _load_error is not None:
            raise BackendUnavailableError(_load_error)
        tried = []
        for path in candidates():
            try:
                lib = ctypes.CDLL(path)
                lib.cudaGetDeviceCount  # noqa: B018  (a library named libcudart without the API is not one)
            except (OSError, AttributeError) as exc:
                tried.append(f"{path} ({exc})")
                continue
            lib.cudaGetErrorString.restype = ctypes.c_char_p
            lib.cudaGetErrorString.argtypes = [ctypes.c_int]
            logger.debug("CUDA runtime: %s", path)
            _lib = lib
            return lib
        _load_error = (
            "the CUDA runtime library (libcudart) was not found; tried " + "; ".join(tried)
            + ". Install the CUDA toolkit or the nvidia-cuda-runtime wheel, or set MXNET_TENSORRT_CUDART to its path"
        )
        raise BackendUnavailableError(_load_error)


def reset() -> None:
    """Forget the loaded library and any load error (tests change the search)."""
    global _lib, _load_error
    with _lock:
        _lib = None
        _load_error = None


def _check(rc: int, what: str) -> None:
    if rc == 0:
        return
    lib = library()
    msg = lib.cudaGetErrorString(rc)
    text = msg.decode("utf-8", "replace") if msg else "unknown error"
    lib.cudaGetLastError()  # a non-sticky error would otherwise be reported again by the next call
    raise CudaError(f"{what} failed: {text} (cudaError {rc})", rc)


def device_count() -> int:
    """Number of CUDA devices.

    Raises:
        BackendUnavailableError: no CUDA runtime.
        CudaError: the runtime cannot talk to a driver (no GPU, driver too old).
    """
    n = ctypes.c_int(0)
    _check(library().cudaGetDeviceCount(ctypes.byref(n)), "cudaGetDeviceCount")
    return int(n.value)


def unavailable_reason() -> Optional[str]:
    """``None`` when a CUDA device can be used, else why not (for error messages)."""
    try:
        n = device_count()
    except BackendUnavailableError as exc:
        return str(exc)
    except CudaError as exc:
        return f"no usable CUDA device: {exc}"
    if n == 0:
        return "no CUDA device: cudaGetDeviceCount returned 0"
    return None


def set_device(device_id: int) -> None:
    """Make ``device_id`` current for this thread (CUDA's current device is per thread)."""
    _check(library().cudaSetDevice(int(device_id)), f"cudaSetDevice({device_id})")


def current_device() -> int:
    d = ctypes.c_int(0)
    _check(library().cudaGetDevice(ctypes.byref(d)), "cudaGetDevice")
    return int(d.value)


def compute_capability(device_id: int) -> Tuple[int, int]:
    """``(major, minor)`` of a device, from ``cudaDeviceGetAttribute``."""
    lib = library()
    major, minor = ctypes.c_int(0), ctypes.c_int(0)
    _check(lib.cudaDeviceGetAttribute(ctypes.byref(major), _ATTR_CC_MAJOR, int(device_id)), "cudaDeviceGetAttribute")
    _check(lib.cudaDeviceGetAttribute(ctypes.byref(minor), _ATTR_CC_MINOR, int(device_id)), "cudaDeviceGetAttribute")
    return int(major.value), int(minor.value)


def device_synchronize() -> None:
    """Wait for all work on the current device, on every stream."""
    _check(library().cudaDeviceSynchronize(), "cudaDeviceSynchronize")


def stream_synchronize(handle: int) -> None:
    """Wait for the work queued on the stream ``handle`` (a ``cudaStream_t`` as an integer; 0 is the default stream)."""
    _check(library().cudaStreamSynchronize(ctypes.c_void_p(int(handle))), "cudaStreamSynchronize")


class Stream:
    """A non-blocking CUDA stream on one device, destroyed by :meth:`close` or when collected."""

    def __init__(self, device_id: Optional[int] = None) -> None:
        lib = library()
        if device_id is not None:
            set_device(device_id)
        self.device_id = current_device() if device_id is None else int(device_id)
        handle = ctypes.c_void_p()
        _check(lib.cudaStreamCreateWithFlags(ctypes.byref(handle), ctypes.c_uint(_STREAM_NON_BLOCKING)),
               "cudaStreamCreateWithFlags")
        self._handle: Optional[int] = int(handle.value or 0)

    @property
    def handle(self) -> int:
        """The ``cudaStream_t`` as an integer (what TensorRT's Python API takes)."""
        if self._handle is None:
            raise CudaError("the CUDA stream was already destroyed")
        return self._handle

    def synchronize(self) -> None:
        _check(library().cudaStreamSynchronize(ctypes.c_void_p(self.handle)), "cudaStreamSynchronize")

    def close(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None and _lib is not None:
            rc = _lib.cudaStreamDestroy(ctypes.c_void_p(handle))
            if rc != 0:
                logger.debug("cudaStreamDestroy returned %d", rc)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: the library may be gone
            pass


def malloc(nbytes: int) -> int:
    """Device memory on the current device (tests; MXNet owns the memory engines use)."""
    p = ctypes.c_void_p()
    _check(library().cudaMalloc(ctypes.byref(p), ctypes.c_size_t(int(nbytes))), f"cudaMalloc({nbytes})")
    return int(p.value or 0)


def free(ptr: int) -> None:
    _check(library().cudaFree(ctypes.c_void_p(int(ptr))), "cudaFree")


def memcpy(dst: int, src: int, nbytes: int, kind: int) -> None:
    """Synchronous ``cudaMemcpy`` between raw addresses (``kind``: HOST_TO_DEVICE, ...)."""
    _check(library().cudaMemcpy(ctypes.c_void_p(int(dst)), ctypes.c_void_p(int(src)), ctypes.c_size_t(int(nbytes)),
                                ctypes.c_int(kind)), "cudaMemcpy")
