# Build switches for mx_trt, in the manner of MXNet's own config.mk.
#
# Each one can be overridden on the make command line
# (`make test USE_TENSORRT_RTX=1`) or from the environment. setup.py reads
# this file and the same environment variables to choose its dependencies.
# Values are 1 (on) or 0 (off).

# TensorRT 10+, NVIDIA's library: needs CUDA and an NVIDIA GPU to run engines.
# Installs `tensorrt` (requirements/tensorrt.txt), whose PyPI packages fetch
# the libraries from NVIDIA's own index: on for docker/Dockerfile.gpu only.
USE_TENSORRT ?= 0

# TensorRT-RTX from PyPI (requirements/trt-rtx.txt, about 95 MB, binaries
# included). Its builder works without a GPU, so exported subgraphs can be
# parsed and built into plans on a CPU-only machine; running the plans needs
# a supported GPU. On by default: the test suite's TensorRT build gate
# (tests/test_trt_rtx_gate.py) parses and builds every exported subgraph with it.
USE_TENSORRT_RTX ?= 1

# ONNX Runtime, the CPU backend that runs the fused subgraphs where there is
# no GPU: the embedded default.
USE_ONNXRUNTIME ?= 1

# OpenVINO (requirements/openvino.txt, the extra mx_trt[openvino]; about 140 MB),
# a second CPU backend (backend='openvino' or MXNET_TENSORRT_BACKEND=openvino).
# On by default so that `make test` covers it; mx_trt works without it.
USE_OPENVINO ?= 1

# Serving with Triton Inference Server (requirements/serve.txt, the extra
# mx_trt[serve]: nvidia-pytriton, which bundles tritonserver, and
# tritonclient; about 60 MB). On by default so that `make test` covers
# mx_trt.serving and `mxtrt serve`.
USE_SERVE ?= 1

# The interpreter that creates .venv. Python 3.9, 3.10 or 3.11 only: MXNet
# 1.9.1 needs numpy 1.23, which has no wheels for newer Pythons. An existing
# .venv keeps its interpreter: run `make distclean` after changing this.
# Debian's /usr/bin/python3.11 when it exists: Triton's Python backend stub
# (serving) embeds the interpreter's shared libpython, which that interpreter
# has (package libpython3.11); any other 3.9-3.11 built with --enable-shared
# serves too.
PYTHON ?= $(if $(wildcard /usr/bin/python3.11),/usr/bin/python3.11,python3)
