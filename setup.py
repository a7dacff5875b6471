"""Packaging for mx_trt.

Install with ``make venv`` (or ``pip install .``): a normal, non-editable
install. Besides the ``mx_trt`` package (with the top-level ``passes/`` as
``mx_trt.passes``) the wheel carries, at
the root of site-packages, ``mx_trt_autoload.py`` and ``mx_trt_autoload.pth``:
the ``.pth`` file arms the start-up hook that patches MXNet's ``simple_bind``
whenever a program imports ``mxnet``. An editable install (``pip install -e``)
does not get that hook; ``import mx_trt`` still installs it.

The dependencies follow the switches of ``config.mk`` (``USE_ONNXRUNTIME``,
``USE_TENSORRT``, ``USE_TENSORRT_RTX``), each overridable by an environment
variable of the same name; the pins come from ``requirements/*.txt``.
"""
import os
import re
import sys

SUPPORTED = ((3, 9), (3, 11))

if not SUPPORTED[0] <= sys.version_info[:2] <= SUPPORTED[1]:
    sys.exit(
        "mx_trt needs Python 3.9, 3.10 or 3.11, not %d.%d (%s): MXNet 1.9.1 needs numpy<1.24, "
        "which has no wheels for newer Pythons. Use one of those, e.g. `make venv PYTHON=python3.11`."
        % (sys.version_info[0], sys.version_info[1], sys.executable)
    )

from setuptools import find_packages, setup  # noqa: E402
from setuptools.command.build_py import build_py  # noqa: E402
from setuptools.command.sdist import sdist  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PTH_FILE = "mx_trt_autoload.pth"
SWITCHES = ("USE_ONNXRUNTIME", "USE_TENSORRT", "USE_TENSORRT_RTX")


def read_config(path: str) -> dict:
    """``NAME ?= value`` (also ``=``, ``:=``) assignments of a make file, comments dropped."""
    values = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*[?:]?=\s*(.*?)\s*$", line.split("#", 1)[0])
            if m:
                values[m.group(1)] = m.group(2)
    return values


def switch_on(config: dict, name: str) -> bool:
    """The switch's value: the environment first (as make does with ``?=``), then config.mk."""
    value = os.environ.get(name, config.get(name, "0")).strip()
    if value not in ("0", "1", ""):
        sys.exit("mx_trt: %s=%r: use 1 or 0 (config.mk)" % (name, value))
    return value == "1"


def read_requirements(name: str) -> list:
    """The requirement lines of ``requirements/<name>.txt`` (pip options and comments dropped)."""
    path = os.path.join(HERE, "requirements", name + ".txt")
    if not os.path.isfile(path):
        sys.exit("mx_trt: %s is missing; build from a full checkout of the repository" % path)
    reqs = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line and not line.startswith("-"):
                reqs.append(line)
    return reqs


def read_version() -> str:
    # Read, not imported: importing mx_trt imports mxnet.
    with open(os.path.join(HERE, "mx_trt", "_version.py"), encoding="utf-8") as f:
        m = re.search(r"""^__version__\s*=\s*["']([^"']+)["']""", f.read(), re.M)
    if not m:
        sys.exit("mx_trt: no __version__ in mx_trt/_version.py")
    return m.group(1)


class BuildPyWithPth(build_py):
    """Also puts the start-up ``.pth`` file at the root of the build tree.

    Whatever lies at the root of ``build_lib`` lands at the root of
    site-packages, where the interpreter reads ``.pth`` files at start-up.
    """

    def run(self) -> None:
        super().run()
        self.copy_file(os.path.join(HERE, PTH_FILE), os.path.join(self.build_lib, PTH_FILE), preserve_mode=False)

    def get_outputs(self, include_bytecode: bool = True) -> list:
        return list(super().get_outputs(include_bytecode)) + [os.path.join(self.build_lib, PTH_FILE)]


class SdistWithBuildInputs(sdist):
    """An sdist that can be built again: with the .pth, config.mk and the requirement files."""

    def add_defaults(self) -> None:
        super().add_defaults()
        self.filelist.append(PTH_FILE)
        self.filelist.append("config.mk")
        self.filelist.extend(
            os.path.join("requirements", n) for n in sorted(os.listdir(os.path.join(HERE, "requirements")))
            if n.endswith(".txt")
        )


config = read_config(os.path.join(HERE, "config.mk"))
extras = {
    "onnxruntime": read_requirements("onnxruntime"),
    # OpenVINO, a second CPU backend (backend='openvino'): optional, `pip install 'mx_trt[openvino]'`;
    # `make venv` installs it with USE_OPENVINO=1 (config.mk's default).
    "openvino": read_requirements("openvino"),
    "tensorrt": read_requirements("tensorrt"),
    "tensorrt-rtx": read_requirements("trt-rtx"),
    "test": read_requirements("test"),
    # Serving with Triton (mx_trt.serving, `mxtrt serve`): optional, `pip install 'mx_trt[serve]'`;
    # `make venv` installs it with USE_SERVE=1 (config.mk's default).
    "serve": read_requirements("serve"),
}
install_requires = read_requirements("base")
if switch_on(config, "USE_ONNXRUNTIME"):
    install_requires += extras["onnxruntime"]
if switch_on(config, "USE_TENSORRT"):
    install_requires += extras["tensorrt"]
if switch_on(config, "USE_TENSORRT_RTX"):
    install_requires += extras["tensorrt-rtx"]

setup(
    name="mx_trt",
    version=read_version(),
    description="MXNet simple_bind with a TensorRT graph pass, switched on by MXNET_USE_TENSORRT=1",
    python_requires=">=3.9,<3.12",
    # The pure passes live at the repository's top level (passes/) and install as
    # mx_trt.passes; mx_trt/passes/ in the checkout only links to them.
    packages=sorted(set(find_packages(include=["mx_trt", "mx_trt.*"])) | {"mx_trt.passes"}),
    package_dir={"mx_trt.passes": "passes"},
    py_modules=["mx_trt_autoload"],
    install_requires=install_requires,
    extras_require=extras,
    entry_points={"console_scripts": ["mxtrt = mx_trt.tools.cli.main:main"]},
    cmdclass={"build_py": BuildPyWithPth, "sdist": SdistWithBuildInputs},
    zip_safe=False,
)
