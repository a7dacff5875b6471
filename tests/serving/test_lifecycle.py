"""The serving lifecycle's pieces without a server: ports, hosts, orphaned folders, the parent-death signal."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from mx_trt.errors import ServeError
from mx_trt.serving.lifecycle import (OWNER_FILE, WORKDIR_PREFIX, check_ports_free, claim_workdir, resolve_host,
                                      sweep_orphans)
from mx_trt.serving.server import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_a_port_in_use_is_named():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        with pytest.raises(ServeError, match=f"the grpc port {port} on 127.0.0.1 is in use"):
            check_ports_free("127.0.0.1", {"metrics": free_port(), "grpc": port})
    check_ports_free("127.0.0.1", {"grpc": port})


def test_the_host_is_resolved_to_an_ipv4_address():
    assert resolve_host("localhost") == "127.0.0.1"
    assert resolve_host("0.0.0.0") == "0.0.0.0"
    with pytest.raises(ServeError, match="names no IPv4 address"):
        resolve_host("no-such-host.invalid")


def _folder(root, name, owner_pid=None):
    path = root / (WORKDIR_PREFIX + name)
    path.mkdir()
    (path / "models").mkdir()
    if owner_pid is not None:
        (path / OWNER_FILE).write_text(json.dumps({"owner": {"pid": owner_pid, "start": 0}}))
    return path


def test_only_folders_whose_owner_and_server_are_gone_are_swept(tmp_path):
    mine = tmp_path / (WORKDIR_PREFIX + "mine")
    mine.mkdir()
    claim_workdir(str(mine))  # this process: alive
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = _folder(tmp_path, "dead", int(done.stdout))
    reused = _folder(tmp_path, "reused", os.getpid())  # a live pid with another start time: pid reuse
    unowned = _folder(tmp_path, "unowned")
    other = tmp_path / "not_ours"
    other.mkdir()
    removed = sweep_orphans(str(tmp_path))
    assert sorted(removed) == sorted([str(dead), str(reused)])
    assert mine.is_dir() and unowned.is_dir() and other.is_dir()


def test_the_server_dies_with_its_parent_even_on_sigkill(tmp_path):
    parent = textwrap.dedent(f"""
        import os, subprocess, sys, time
        sys.path.insert(0, {ROOT!r})
        from mx_trt.serving.lifecycle import die_with_parent
        child = subprocess.Popen(die_with_parent([sys.executable, "-c", "import time; time.sleep(120)"],
                                                 os.getpid()))
        print(child.pid, flush=True)
        time.sleep(120)
    """)
    proc = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True)
    child = int(proc.stdout.readline())
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{child}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    break
        except OSError:
            break
        time.sleep(0.05)
    else:
        os.kill(child, signal.SIGKILL)
        pytest.fail("the child outlived its SIGKILLed parent by 10 s")
