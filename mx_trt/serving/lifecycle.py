"""The life of a served model's processes and folders, apart from Triton itself.

- :func:`resolve_host`: ``--host`` as the IPv4 address every listener binds.
- :func:`check_ports_free`: each port is bound once before the server starts,
  so a port in use (by another program, or by a server orphaned by an earlier
  ``mxtrt serve``) is named in the error instead of a readiness probe reaching
  that other server.
- :func:`die_with_parent`: the command that ties ``tritonserver``'s life to
  this process (``PR_SET_PDEATHSIG``): if this process dies, even by SIGKILL,
  the server gets SIGTERM, drains for its exit timeout and exits; its stubs
  follow it.
- :func:`claim_workdir` / :func:`sweep_orphans`: each temporary folder records
  its owner (pid and start time); a folder whose owner and server are both gone
  is removed when the next server starts.
- :func:`stub_processes`: the Python-backend stubs of a server, alive or dead
  (zombies), from ``/proc``.
"""
from __future__ import annotations

import glob
import json
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from mx_trt.errors import ServeError
from mx_trt.fsutil import write_atomic

logger = logging.getLogger(__name__)

#: The prefix of every temporary serving folder.
WORKDIR_PREFIX = "mx_trt_serve_"
OWNER_FILE = "owner.json"
#: ``comm`` of Triton's Python-backend stub (``/proc/PID/stat`` keeps 15 characters).
STUB_COMM = "triton_python_b"


def resolve_host(host: str) -> str:
    """The IPv4 address ``host`` names (``localhost`` -> ``127.0.0.1``; ``0.0.0.0``: every interface).

    Raises:
        ServeError: it names no IPv4 address.
    """
    try:
        infos = socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise ServeError(f"--host {host!r} names no IPv4 address of this machine: {exc}") from None
    return str(infos[0][4][0])


def check_ports_free(host: str, ports: Mapping[str, int]) -> None:
    """Bind each ``{what: port}`` on ``host`` once (as the servers will, with ``SO_REUSEADDR``), then release it.

    Raises:
        ServeError: a port is in use or cannot be bound there (the port and its use named).
    """
    for what, port in ports.items():
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, port))
            except OSError as exc:
                raise ServeError(port_error(what, host, port, exc)) from None


def port_error(what: str, host: str, port: int, exc: OSError) -> str:
    """The message for a port that cannot be bound."""
    if exc.errno == 98:  # EADDRINUSE
        return (f"the {what} port {port} on {host} is in use (another server, or one left running by an earlier "
                f"mxtrt serve, listens there): stop it or choose another --{what}-port")
    return f"cannot listen on {host}:{port} for {what}: {exc.strerror or exc}"


#: Run by this interpreter in front of the server: ``PR_SET_PDEATHSIG``, then ``exec`` of the server itself.
#: It replaces a ``preexec_fn``, which is unsafe in a process with threads (MXNet's).
_DIE_WITH_PARENT = (
    "import ctypes, os, sys\n"
    "parent, sig = int(sys.argv[1]), int(sys.argv[2])\n"
    "try:\n"
    "    ctypes.CDLL(None, use_errno=True).prctl(1, sig, 0, 0, 0)\n"  # 1: PR_SET_PDEATHSIG
    "except (OSError, AttributeError):\n"
    "    pass\n"
    "if os.getppid() != parent:\n"
    "    sys.exit(1)\n"
    "os.execv(sys.argv[3], sys.argv[3:])\n")


def die_with_parent(cmd: Sequence[str], parent: int, sig: int = signal.SIGTERM) -> List[str]:
    """``cmd`` made to get ``sig`` when ``parent`` dies, even by SIGKILL (Linux ``PR_SET_PDEATHSIG``).

    A small step of this interpreter sets the signal, then ``exec``s ``cmd``
    (the setting survives the ``exec``); a parent already gone makes it exit.
    The signal follows the *thread* that started the child: start servers
    from a thread that lives as long as they do (the main thread, typically).
    """
    return [sys.executable, "-I", "-S", "-c", _DIE_WITH_PARENT, str(parent), str(int(sig)), *cmd]


def _start_time(pid: int) -> Optional[int]:
    """The start time of ``pid`` in clock ticks since boot (``/proc/PID/stat`` field 22), or ``None`` if it is
    gone or a zombie (dead, not yet reaped)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if len(fields) <= 19 or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def _alive(record: Optional[Mapping[str, int]]) -> bool:
    if not record:
        return False
    start = _start_time(int(record.get("pid", 0)))
    return start is not None and start == record.get("start")


def claim_workdir(workdir: str, server_pid: Optional[int] = None) -> None:
    """Record this process (and, once started, the server) as ``workdir``'s owners."""
    doc: Dict[str, Dict[str, int]] = {"owner": {"pid": os.getpid(), "start": _start_time(os.getpid()) or 0}}
    if server_pid is not None:
        doc["server"] = {"pid": server_pid, "start": _start_time(server_pid) or 0}
    write_atomic(os.path.join(workdir, OWNER_FILE), json.dumps(doc))


def sweep_orphans(root: Optional[str] = None) -> List[str]:
    """Remove the serving folders under ``root`` (default: the temporary folder) whose owner and server are gone.

    Folders without an owner record (being created, or of another user) are
    left alone. Returns the folders removed.
    """
    removed = []
    for folder in glob.glob(os.path.join(root or tempfile.gettempdir(), WORKDIR_PREFIX + "*")):
        try:
            if os.stat(folder).st_uid != os.getuid():
                continue
            with open(os.path.join(folder, OWNER_FILE), encoding="utf-8") as f:
                doc = json.load(f)
        except (OSError, ValueError):
            continue
        if not isinstance(doc, dict) or _alive(doc.get("owner")) or _alive(doc.get("server")):
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    if removed:
        logger.info("removed %d serving folder(s) left by servers that died: %s", len(removed), ", ".join(removed))
    return removed


def _stat(pid: str) -> Optional[Tuple[str, str, int]]:
    """``(comm, state, ppid)`` of ``pid``, or ``None``."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    head, _, tail = text.rpartition(")")
    fields = tail.split()
    if len(fields) < 2:
        return None
    return head.split("(", 1)[-1], fields[0], int(fields[1])


def _children(pid: int) -> List[str]:
    """The children of ``pid``: from ``/proc/PID/task/*/children`` where the kernel has it, else every process."""
    found: List[str] = []
    tasks = glob.glob(f"/proc/{pid}/task/*/children")
    if not tasks:
        return [e for e in os.listdir("/proc") if e.isdigit()]
    for path in tasks:
        try:
            with open(path, encoding="ascii") as f:
                found.extend(f.read().split())
        except OSError:
            continue
    return found


def stub_processes(server_pid: int) -> Dict[int, bool]:
    """The Python-backend stubs whose parent is ``server_pid``: ``{pid: alive}`` (a zombie is dead)."""
    out: Dict[int, bool] = {}
    for entry in _children(server_pid):
        st = _stat(entry)
        if st is not None and st[2] == server_pid and st[0] == STUB_COMM:
            out[int(entry)] = st[1] not in ("Z", "X")
    return out
