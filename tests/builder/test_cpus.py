"""mx_trt.builder.cpus: the CPUs a process may use, from its affinity and a fake cgroup tree."""
from __future__ import annotations

import os

import pytest

from mx_trt.builder import cpus
from mx_trt.settings import Settings


def _write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


@pytest.fixture
def affinity(monkeypatch):
    def set_n(n):
        monkeypatch.setattr(cpus, "_affinity", lambda: n)
    return set_n


def test_cgroup_v2_quota(tmp_path, affinity):
    root = tmp_path / "cg"
    _write(str(root / "cgroup.controllers"), "cpu io memory\n")
    _write(str(root / "kubepods" / "pod1" / "cpu.max"), "150000 100000\n")
    _write(str(root / "kubepods" / "cpu.max"), "max 100000\n")
    proc = tmp_path / "cgroup"
    _write(str(proc), "0::/kubepods/pod1\n")
    assert cpus.cgroup_cpu_limit(str(root), str(proc)) == pytest.approx(1.5)
    affinity(8)
    assert cpus.usable_cpus(str(root), str(proc)) == 2  # 1.5 CPUs round up
    affinity(1)
    assert cpus.usable_cpus(str(root), str(proc)) == 1  # the affinity mask is smaller


def test_cgroup_v2_parent_limit_binds_child(tmp_path, affinity):
    root = tmp_path / "cg"
    _write(str(root / "cgroup.controllers"), "cpu\n")
    _write(str(root / "a" / "cpu.max"), "100000 100000\n")
    _write(str(root / "a" / "b" / "cpu.max"), "max 100000\n")
    _write(str(tmp_path / "cgroup"), "0::/a/b\n")
    affinity(4)
    assert cpus.usable_cpus(str(root), str(tmp_path / "cgroup")) == 1


def test_cgroup_v1_cfs_quota(tmp_path, affinity):
    root = tmp_path / "cg"
    d = root / "cpu,cpuacct" / "docker" / "abc"
    _write(str(d / "cpu.cfs_quota_us"), "300000\n")
    _write(str(d / "cpu.cfs_period_us"), "100000\n")
    _write(str(tmp_path / "cgroup"), "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n")
    assert cpus.cgroup_cpu_limit(str(root), str(tmp_path / "cgroup")) == pytest.approx(3.0)
    affinity(16)
    assert cpus.usable_cpus(str(root), str(tmp_path / "cgroup")) == 3


def test_cgroup_v1_no_quota_and_container_view(tmp_path, affinity):
    # In a container the host's path is not visible: the mount's root is the container's own cgroup.
    root = tmp_path / "cg"
    _write(str(root / "cpu" / "cpu.cfs_quota_us"), "-1\n")
    _write(str(root / "cpu" / "cpu.cfs_period_us"), "100000\n")
    _write(str(tmp_path / "cgroup"), "3:cpu:/host/path/not/mounted\n")
    assert cpus.cgroup_cpu_limit(str(root), str(tmp_path / "cgroup")) is None
    _write(str(root / "cpu" / "cpu.cfs_quota_us"), "50000\n")
    assert cpus.cgroup_cpu_limit(str(root), str(tmp_path / "cgroup")) == pytest.approx(0.5)
    affinity(2)
    assert cpus.usable_cpus(str(root), str(tmp_path / "cgroup")) == 1


def test_malformed_or_missing_files_mean_no_quota(tmp_path, affinity):
    root = tmp_path / "cg"
    _write(str(root / "cgroup.controllers"), "cpu\n")
    _write(str(root / "cpu.max"), "garbage\n")
    _write(str(tmp_path / "cgroup"), "0::/\n")
    assert cpus.cgroup_cpu_limit(str(root), str(tmp_path / "cgroup")) is None
    assert cpus.cgroup_cpu_limit(str(tmp_path / "none"), str(tmp_path / "missing")) is None
    affinity(3)
    assert cpus.usable_cpus(str(tmp_path / "none"), str(tmp_path / "missing")) == 3


def test_this_process_matches_its_affinity():
    n = cpus.usable_cpus()
    assert 1 <= n <= len(os.sched_getaffinity(0))


def test_onnxruntime_engines_use_the_usable_cpus(monkeypatch):
    from mx_trt.builder.backends import onnxruntime as ortb

    monkeypatch.delenv("MXNET_TENSORRT_ORT_THREADS", raising=False)
    monkeypatch.setattr(ortb, "engine_threads", lambda: 3)
    assert ortb._session_options(threads=ortb._threads(Settings.from_env().engine_options())).intra_op_num_threads == 3
    monkeypatch.setenv("MXNET_TENSORRT_ORT_THREADS", "1")  # the bind's settings carry it to the engines
    assert ortb._session_options(threads=ortb._threads(Settings.from_env().engine_options())).intra_op_num_threads == 1


def test_cpu_info_names_the_instruction_sets_from_cpuinfo(monkeypatch, tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse avx2 fma avx512f avx512_vnni sha_ni\n"
                    "processor\t: 1\nmodel name\t: other\nflags\t\t: fpu\n")
    real_open = open
    monkeypatch.setattr("builtins.open", lambda path, *a, **kw: real_open(info if path == "/proc/cpuinfo" else path,
                                                                          *a, **kw))
    assert cpus.cpu_info() == ("AMD EPYC", "avx2,fma,avx512f,avx512_vnni")  # in ISA_FLAGS order, others dropped
    info.unlink()
    assert cpus.cpu_info() == ("", "")  # unreadable: empty, never an error
