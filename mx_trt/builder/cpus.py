"""How many CPUs this process may use: its affinity mask and its container's CPU quota.

``os.cpu_count()`` counts the machine's CPUs. A process pinned to some of them
(``taskset``, ``os.sched_setaffinity``, a cpuset) or in a container with a CPU
quota (Kubernetes ``limits.cpu``, ``docker --cpus``) gets fewer; a thread pool
sized to the machine then oversubscribes the CPUs it has, and its threads wait
on each other. Engines size their thread pools with :func:`usable_cpus`.

The quota is read from the cgroup of this process: cgroup v2 ``cpu.max``
(``"<quota> <period>"`` or ``"max <period>"``), or cgroup v1
``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (quota ``-1`` for none), at every
level from the process's own cgroup up to the mount's root (a parent's limit
binds its children). Quotas of fractional CPUs round up.
"""
from __future__ import annotations

import functools
import math
import os
from typing import List, Optional, Tuple

__all__ = ["cgroup_cpu_limit", "cpu_info", "usable_cpus"]

#: Where cgroup file systems are mounted.
CGROUP_ROOT = "/sys/fs/cgroup"


def _read(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _levels(mount: str, rel: str) -> List[str]:
    """``mount/rel`` and each of its parents up to ``mount``; ``mount`` alone when ``rel`` is not under it.

    In a container, ``/proc/self/cgroup`` may name a path of the host's
    hierarchy that is not visible in the container's mount: its root is then
    the container's own cgroup.
    """
    parts = [p for p in rel.strip("/").split("/") if p and p != ".."]
    out = [os.path.join(mount, *parts[:k]) for k in range(len(parts), 0, -1)]
    return [d for d in out if os.path.isdir(d)] + [mount]


def _quota_v2(directory: str) -> Optional[float]:
    raw = _read(os.path.join(directory, "cpu.max"))
    if not raw:
        return None
    fields = raw.split()
    if len(fields) != 2 or fields[0] == "max":
        return None
    try:
        quota, period = int(fields[0]), int(fields[1])
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def _quota_v1(directory: str) -> Optional[float]:
    q, p = _read(os.path.join(directory, "cpu.cfs_quota_us")), _read(os.path.join(directory, "cpu.cfs_period_us"))
    try:
        quota, period = int(q or ""), int(p or "")
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def _cgroups(proc_cgroup: str) -> List[Tuple[str, str]]:
    """``(controllers, path)`` per line of ``/proc/self/cgroup`` (``hierarchy:controllers:path``)."""
    text = _read(proc_cgroup) or ""
    out = []
    for line in text.splitlines():
        fields = line.split(":", 2)
        if len(fields) == 3:
            out.append((fields[1], fields[2]))
    return out


def cgroup_cpu_limit(root: str = CGROUP_ROOT, proc_cgroup: str = "/proc/self/cgroup") -> Optional[float]:
    """The CPU quota of this process's cgroup in CPUs (``1.5`` for 150 ms per 100 ms), or ``None`` for none.

    The smallest quota along the way from the process's cgroup to the root
    counts, in the v2 hierarchy and in the v1 ``cpu`` controller alike.
    Unreadable or malformed files count as no quota.

    Args:
        root: The cgroup mount point (tests point it at a fake tree).
        proc_cgroup: The process's cgroup membership file.
    """
    limits: List[float] = []
    for controllers, rel in _cgroups(proc_cgroup):
        if controllers == "":  # cgroup v2: one unified hierarchy
            mount = root if os.path.isfile(os.path.join(root, "cgroup.controllers")) else os.path.join(root, "unified")
            limits += [q for d in _levels(mount, rel) for q in [_quota_v2(d)] if q is not None]
        elif "cpu" in controllers.split(","):
            for name in (controllers, "cpu", "cpu,cpuacct", "cpuacct,cpu"):
                mount = os.path.join(root, name)
                if os.path.isdir(mount):
                    limits += [q for d in _levels(mount, rel) for q in [_quota_v1(d)] if q is not None]
                    break
    return min(limits) if limits else None


def _affinity() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def usable_cpus(root: str = CGROUP_ROOT, proc_cgroup: str = "/proc/self/cgroup") -> int:
    """CPUs this process may use: its affinity mask, bounded by its cgroup's CPU quota (rounded up); at least 1."""
    limit = cgroup_cpu_limit(root, proc_cgroup)
    n = _affinity()
    if limit is not None:
        n = min(n, max(1, math.ceil(limit - 1e-9)))
    return max(1, n)


@functools.lru_cache(maxsize=1)
def _cached_quota() -> Optional[float]:
    return cgroup_cpu_limit()


def engine_threads() -> int:
    """:func:`usable_cpus` for this process, its quota read once (the affinity mask is read at every call)."""
    limit = _cached_quota()
    n = _affinity()
    if limit is not None:
        n = min(n, max(1, math.ceil(limit - 1e-9)))
    return max(1, n)


#: Instruction-set flags of /proc/cpuinfo that change the kernels a CPU backend compiles (and its speed).
ISA_FLAGS = ("avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
             "avx512_fp16", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8")


def cpu_info() -> Tuple[str, str]:
    """(model name, the comma-separated :data:`ISA_FLAGS` it has) from /proc/cpuinfo; empty where unknown.

    Part of OpenVINO's plan-cache keys, and what the benchmarks record of the machine. O(size of cpuinfo).
    """
    model, flags = "", set()  # type: str, set[str]
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name") and not model:
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags") and not flags:
                    flags = set(line.split(":", 1)[1].split())
                if model and flags:
                    break
    except OSError:
        pass
    return model, ",".join(f for f in ISA_FLAGS if f in flags)
