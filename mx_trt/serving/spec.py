"""What a served model folder holds besides its checkpoint: ``mx_trt_serve.json``.

Layout of one version folder of a Triton model (``REPO/NAME/1/``)::

    model.py              imports mx_trt.serving.backend.TritonPythonModel
    model-symbol.json     the checkpoint's symbol (the original one: each instance binds it with the pass)
    model-0000.params     its weights (arg:/aux:)
    mx_trt_serve.json     format, inputs and outputs (name, dtype, sample dims), max_batch, accelerate,
                          allow_nonfinite, imports
    user_*.py             the user's modules that register custom operators (``--import FILE.py``), if any
"""
from __future__ import annotations

import importlib.util
import json
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Dict, List, Tuple

from mx_trt.errors import ServeError
from mx_trt.serving.executors import TensorSpec

FORMAT = 1
SPEC_FILE = "mx_trt_serve.json"
SYMBOL_FILE = "model-symbol.json"
PARAMS_FILE = "model-0000.params"


@dataclass
class ServeSpec:
    """The contents of ``mx_trt_serve.json``."""

    inputs: List[TensorSpec]
    outputs: List[TensorSpec]
    max_batch: int
    accelerate: bool = True
    allow_nonfinite: bool = False
    #: Modules imported before the symbol is read (they register custom operators): a module name, or a
    #: ``user_*.py`` file of the folder.
    imports: List[str] = field(default_factory=list)

    def to_json(self) -> Dict[str, Any]:
        return {"format": FORMAT, "symbol": SYMBOL_FILE, "params": PARAMS_FILE,
                "inputs": [t.to_json() for t in self.inputs], "outputs": [t.to_json() for t in self.outputs],
                "max_batch": self.max_batch, "accelerate": self.accelerate, "allow_nonfinite": self.allow_nonfinite,
                "imports": list(self.imports)}


def write_spec(folder: str, spec: ServeSpec) -> None:
    """Write ``folder/mx_trt_serve.json``."""
    with open(os.path.join(folder, SPEC_FILE), "w", encoding="utf-8") as f:
        json.dump(spec.to_json(), f, indent=2)


def read_spec(folder: str) -> ServeSpec:
    """Read and check ``folder/mx_trt_serve.json``.

    Raises:
        ServeError: missing, unreadable, of another format, or malformed (named).
    """
    path = os.path.join(folder, SPEC_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        if doc.get("format") != FORMAT:
            raise ServeError(f"{path} has format {doc.get('format')!r}; this mx_trt reads format {FORMAT}")
        max_batch = doc["max_batch"]
        if type(max_batch) is not int or max_batch < 1:
            raise ValueError(f"max_batch {max_batch!r} is not an integer >= 1")
        return ServeSpec([TensorSpec.from_json(t) for t in doc["inputs"]],
                         [TensorSpec.from_json(t) for t in doc["outputs"]], max_batch,
                         bool(doc.get("accelerate", True)), bool(doc.get("allow_nonfinite", False)),
                         [str(m) for m in doc.get("imports", [])])
    except ServeError:
        raise
    except FileNotFoundError:
        raise ServeError(f"{folder} is not an mx_trt model folder: no {SPEC_FILE}") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ServeError(f"{path} is damaged: {type(exc).__name__}: {exc}") from None


def import_user_modules(folder: str, imports: List[str]) -> None:
    """Import the spec's modules: ``user_*.py`` files from ``folder``, other entries by module name.

    Raises:
        ServeError: a module cannot be imported (its error named).
    """
    for entry in imports:
        try:
            if entry.endswith(".py"):
                if os.path.basename(entry) != entry or not entry.startswith("user_"):
                    raise ValueError(f"{entry!r} is not a user_*.py file of the folder")
                mspec = importlib.util.spec_from_file_location(entry[:-3], os.path.join(folder, entry))
                if mspec is None or mspec.loader is None:
                    raise ImportError(f"cannot load {entry}")
                module = importlib.util.module_from_spec(mspec)
                sys.modules[entry[:-3]] = module
                mspec.loader.exec_module(module)
            else:
                importlib.import_module(entry)
        except Exception as exc:  # any error of the user's module
            raise ServeError(f"{folder}: cannot import {entry}: {type(exc).__name__}: {exc}") from None


def load_checkpoint_files(folder: str) -> Tuple[Any, Dict[str, Any], Dict[str, Any]]:
    """The folder's symbol and its ``arg:``/``aux:`` parameters, as ``mx.model.load_checkpoint`` returns them.

    Raises:
        ServeError: a file is missing or unreadable.
    """
    import mxnet as mx

    sym_path, params_path = os.path.join(folder, SYMBOL_FILE), os.path.join(folder, PARAMS_FILE)
    try:
        symbol = mx.sym.load(sym_path)
        saved = mx.nd.load(params_path)
    except (OSError, mx.base.MXNetError) as exc:
        raise ServeError(f"cannot read the checkpoint in {folder}: {' '.join(str(exc).split())[:300]}") from None
    if not isinstance(saved, dict):
        raise ServeError(f"{params_path} holds a list of arrays, not arg:/aux: parameters")
    args = {k[4:]: v for k, v in saved.items() if k.startswith("arg:")}
    aux = {k[4:]: v for k, v in saved.items() if k.startswith("aux:")}
    return symbol, args, aux
