# mx_trt developer entry points. The switches are in config.mk; override them
# on the command line, e.g. `make test USE_TENSORRT_RTX=1`.
#
#   make venv       .venv with the pinned stack and mx_trt installed (non-editable)
#   make test       the test suite in TEST_WORKERS processes (pytest-xdist, a test file per worker at a time;
#                   TEST_WORKERS=0: one process; PYTEST_ARGS="-m gpu" and the like are passed on)
#   make typecheck  mypy on mx_trt/ (passes/ included, as mx_trt.passes)
#   make demo       python -m mx_trt.tools.demo
#   make bench      benchmarks/run.py
#   make clean      build outputs and caches; `make distclean` also removes .venv

include config.mk

VENV        ?= .venv
PYTEST_ARGS ?=
# Two: the suite took 18 min in two processes against 38 in one on the 2-core machines.
TEST_WORKERS ?= 2
VENV_PY     := $(VENV)/bin/python
PIP         := $(VENV_PY) -m pip --disable-pip-version-check
PIP_INSTALL := $(PIP) install --progress-bar off
REQ         := requirements
STUBS_TMP   := $(VENV)/.typestubs-download

# The switches reach setup.py (which reads the same names) through the environment.
export USE_TENSORRT USE_TENSORRT_RTX USE_ONNXRUNTIME USE_OPENVINO USE_SERVE

# Requirement files selected by the switches, and those switched off.
SELECTED := $(REQ)/base.txt $(REQ)/test.txt
UNSELECTED :=
ifeq ($(USE_ONNXRUNTIME),1)
SELECTED += $(REQ)/onnxruntime.txt
else
UNSELECTED += $(REQ)/onnxruntime.txt
endif
ifeq ($(USE_OPENVINO),1)
SELECTED += $(REQ)/openvino.txt
else
UNSELECTED += $(REQ)/openvino.txt
endif
ifeq ($(USE_TENSORRT),1)
SELECTED += $(REQ)/tensorrt.txt
else
UNSELECTED += $(REQ)/tensorrt.txt
endif
ifeq ($(USE_TENSORRT_RTX),1)
SELECTED += $(REQ)/trt-rtx.txt
else
UNSELECTED += $(REQ)/trt-rtx.txt
endif
ifeq ($(USE_SERVE),1)
SELECTED += $(REQ)/serve.txt
else
UNSELECTED += $(REQ)/serve.txt
endif

# Stamps inside the venv: deleting .venv resets everything.
CONFIG_STAMP := $(VENV)/.mx_trt-config
DEPS_STAMP   := $(VENV)/.mx_trt-deps
PKG_STAMP    := $(VENV)/.mx_trt-installed
CONFIG_LINE  := PYTHON=$(PYTHON) USE_TENSORRT=$(USE_TENSORRT) USE_TENSORRT_RTX=$(USE_TENSORRT_RTX) USE_ONNXRUNTIME=$(USE_ONNXRUNTIME) USE_OPENVINO=$(USE_OPENVINO) USE_SERVE=$(USE_SERVE)

# What the installed copy is built from. The folders are listed too, so that
# adding or deleting a module also triggers a reinstall.
PKG_SOURCES := setup.py mx_trt_autoload.py mx_trt_autoload.pth \
	$(shell find mx_trt passes -name __pycache__ -prune -o \( -type d -o -name '*.py' \) -print 2>/dev/null)

# One clear error for an unsupported interpreter, before anything is installed
# (numpy 1.23.5 would otherwise fail to build from source).
PY_CHECK := import sys; v = sys.version_info[:2]; (3, 9) <= v <= (3, 11) or sys.exit( \
	"mx_trt needs Python 3.9, 3.10 or 3.11, but %s is %d.%d: MXNet 1.9.1 needs numpy<1.24, which has no wheels " \
	"for newer Pythons. Run with PYTHON=python3.11 (command line or config.mk)." % ((sys.executable,) + v))

# Prints which packages of the requirement files given as arguments are installed.
INSTALLED_OF := import re, sys, importlib.metadata as md; \
	norm = lambda n: re.sub(r"[-_.]+", "-", n).lower(); \
	have = {norm(d.metadata["Name"]) for d in md.distributions()}; \
	lines = [l.partition(chr(35))[0].strip() for f in sys.argv[1:] for l in open(f)]; \
	names = [norm(re.split(r"[=<>!~;\s\[]", l)[0]) for l in lines if l and not l.startswith("-")]; \
	print(" ".join(n for n in names if n in have))

# TensorRT type stubs (requirements/typestubs.txt) for mypy. They are not
# installed as they come: their folders `tensorrt/` and `tensorrt_bindings/`
# would make `import tensorrt` succeed as an empty namespace package, their
# declared dependency is the real tensorrt, and a few of their lines are not
# valid Python (a parameter named `in`, `...` as a type, a required parameter
# after defaulted ones), which stops mypy. So they are downloaded apart, those
# lines mended, and the result copied into site-packages as the PEP 561
# stub-only packages `tensorrt-stubs/` and `tensorrt_bindings-stubs/`: mypy
# reads them (and, as for any installed package, does not report their own
# remaining flaws) while Python never imports them.
define MEND_STUBS
import ast, os, re, shutil, sys, sysconfig
def mend(m):
    line = m.group(0).replace(", in: ", ", in_: ")
    line = line.replace(", channel_axis: int)", ", channel_axis: int = ...)")
    return re.sub(r": \.\.\.(?=[,)])", ": typing.Any", line)
site = sysconfig.get_paths()["purelib"]
for pkg in ("tensorrt", "tensorrt_bindings"):
    dst = os.path.join(site, pkg + "-stubs")
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(os.path.join(sys.argv[1], pkg), dst)
    for root, _, files in os.walk(dst):
        for name in files:
            if name.endswith(".pyi"):
                path = os.path.join(root, name)
                with open(path, encoding="utf-8") as f:
                    text = re.sub(r"(?m)^[ \t]*def .*$$", mend, f.read())
                ast.parse(text, path)
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text)
endef
export MEND_STUBS

.DEFAULT_GOAL := venv
.PHONY: venv deps test typecheck demo bench clean distclean check-python FORCE

venv: $(PKG_STAMP)

deps: $(DEPS_STAMP)

define check_python
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "mx_trt: PYTHON=$(PYTHON) was not found; set PYTHON to a Python 3.9-3.11 interpreter" >&2; exit 1; }
	@$(PYTHON) -c '$(PY_CHECK)'
endef

check-python:
	$(check_python)

$(VENV_PY):
	$(check_python)
	$(PYTHON) -m venv $(VENV)

# Rewritten only when a switch changes, so that only then the dependencies are redone.
$(CONFIG_STAMP): FORCE | $(VENV_PY)
	@if [ "$$(cat $@ 2>/dev/null)" != "$(CONFIG_LINE)" ]; then echo "$(CONFIG_LINE)" > $@; fi

$(DEPS_STAMP): $(wildcard $(REQ)/*.txt) config.mk $(CONFIG_STAMP)
	@$(VENV_PY) -c '$(PY_CHECK)'
	$(PIP_INSTALL) -r $(REQ)/build.txt
	$(PIP_INSTALL) $(addprefix -r ,$(SELECTED))
	@# GluonCV and GluonNLP without their own pins (they would move numpy), then what they import.
	$(PIP_INSTALL) --no-deps --no-build-isolation -r $(REQ)/models.txt
	$(PIP_INSTALL) -r $(REQ)/models-runtime.txt
	@# Extras switched off since the last install are removed, so the venv matches the switches.
	@off="$$($(VENV_PY) -c '$(INSTALLED_OF)' $(UNSELECTED))"; \
	if [ -n "$$off" ]; then echo "$(PIP) uninstall -y $$off"; $(PIP) uninstall -y $$off; fi
	rm -rf $(STUBS_TMP)
	$(PIP_INSTALL) --no-deps --target $(STUBS_TMP) -r $(REQ)/typestubs.txt
	$(VENV_PY) -c "$$MEND_STUBS" $(STUBS_TMP)
	rm -rf $(STUBS_TMP)
	touch $@

# Non-editable, so that mx_trt_autoload.pth lands in site-packages. build/ is
# removed first: setuptools would otherwise ship modules deleted since.
$(PKG_STAMP): $(DEPS_STAMP) $(PKG_SOURCES)
	rm -rf build
	$(PIP_INSTALL) --no-deps --no-build-isolation --use-pep517 .
	rm -rf build
	touch $@

test: venv
	$(VENV_PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

typecheck: venv
	$(VENV_PY) -m mypy mx_trt

demo: venv
	$(VENV_PY) -m mx_trt.tools.demo

bench: venv
	$(PIP_INSTALL) -r $(REQ)/bench.txt
	$(VENV_PY) benchmarks/run.py

clean:
	rm -rf build dist *.egg-info .pytest_cache .mypy_cache .hypothesis
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)

FORCE:
