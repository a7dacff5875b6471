"""Shared pieces of the serving tests: small checkpoints, their native reference, and a server per module.

Every server test needs the serve extra and an interpreter whose shared
libpython Triton's stub can embed (``mx_trt.serving.serve_problem``). The tests
skip only where the extra is switched off (``USE_SERVE=0``, config.mk's switch,
which the Makefile exports); anywhere else a missing extra or an interpreter that
cannot serve fails them, so a broken install never passes as skipped.
"""
from __future__ import annotations

import contextlib
import importlib
import os
from types import ModuleType
from typing import Dict, Iterator, List, Sequence

import mxnet as mx
import numpy as np
import pytest

from mx_trt.serving import ServeOptions, running, serve_problem

RTOL, ATOL = 1e-4, 1e-5
#: What the server's instances see: a private plan cache, and every subgraph made an engine.
SERVER_ENV = {"MXNET_TENSORRT_ENGINE_RULE": "always", "MXNET_TENSORRT_MIN_SUBGRAPH_SIZE": "2"}


#: The serve extra switched off by the build switch: the only reason serving tests skip.
SERVE_OFF = os.environ.get("USE_SERVE", "1").strip() == "0"
SERVE_OFF_REASON = "the serve extra is switched off (USE_SERVE=0)"


def needs_server() -> None:
    """Skip with USE_SERVE=0; otherwise fail when this interpreter cannot serve."""
    if SERVE_OFF:
        pytest.skip(SERVE_OFF_REASON)
    problem = serve_problem()
    if problem is not None:
        pytest.fail(f"cannot serve here: {problem} (`make test` installs the serve extra: USE_SERVE=1 in config.mk)")


def triton_client(module: str) -> ModuleType:
    """A ``tritonclient`` module, at a test module's import: skips the module with USE_SERVE=0, else must import."""
    if SERVE_OFF:
        pytest.skip(SERVE_OFF_REASON, allow_module_level=True)
    return importlib.import_module(module)


def small_cnn(prefix: str, size: int = 16) -> None:
    """conv-BN-relu-pool x2 and a FullyConnected, seeded random weights, saved as ``prefix`` epoch 0."""
    h = mx.sym.var("data")
    for i, ch in enumerate((8, 16)):
        h = mx.sym.Convolution(h, num_filter=ch, kernel=(3, 3), pad=(1, 1), name=f"conv{i}")
        h = mx.sym.BatchNorm(h, fix_gamma=False, name=f"bn{i}")
        h = mx.sym.Activation(h, act_type="relu", name=f"relu{i}")
        h = mx.sym.Pooling(h, kernel=(2, 2), stride=(2, 2), pool_type="max", name=f"pool{i}")
    sym = mx.sym.FullyConnected(mx.sym.flatten(h), num_hidden=10, name="fc")
    _save(sym, prefix, {"data": (1, 3, size, size)}, {})


def two_in_two_out(prefix: str) -> None:
    """Integer token ids (embedded), a float mask and one float per sample (a length, as BERT's) in;
    two outputs: per-token features and a pooled score divided by the length."""
    tokens = mx.sym.var("tokens")
    mask = mx.sym.var("mask")
    length = mx.sym.var("length")
    emb = mx.sym.Embedding(tokens, input_dim=50, output_dim=8, name="emb")
    feats = mx.sym.FullyConnected(emb, num_hidden=6, flatten=False, name="proj")
    feats = mx.sym.broadcast_mul(mx.sym.Activation(feats, act_type="tanh", name="act"),
                                 mx.sym.expand_dims(mask, axis=2), name="masked")
    pooled = mx.sym.broadcast_div(mx.sym.sum(feats, axis=1, name="pool"), mx.sym.expand_dims(length, axis=1),
                                  name="mean")
    score = mx.sym.FullyConnected(pooled, num_hidden=3, name="score")
    _save(mx.sym.Group([feats, score]), prefix, {"tokens": (1, 7), "mask": (1, 7), "length": (1,)},
          {"tokens": "int32"})


def _save(sym: mx.sym.Symbol, prefix: str, shapes: Dict[str, tuple], dtypes: Dict[str, str]) -> None:
    rng = np.random.RandomState(0)
    arg_shapes, _, aux_shapes = sym.infer_shape(**shapes)
    args = {n: mx.nd.array(rng.uniform(-0.3, 0.3, s)) for n, s in zip(sym.list_arguments(), arg_shapes)
            if n not in shapes}
    aux = {n: mx.nd.array(rng.uniform(0.5, 1.5, s) if "var" in n else rng.uniform(-0.1, 0.1, s))
           for n, s in zip(sym.list_auxiliary_states(), aux_shapes)}
    mx.model.save_checkpoint(prefix, 0, sym, args, aux)


def native_outputs(prefix: str, feeds: Dict[str, np.ndarray]) -> List[np.ndarray]:
    """MXNet's own outputs for ``feeds`` (the reference every served output is compared with)."""
    sym, args, aux = mx.model.load_checkpoint(prefix, 0)
    type_dict = {k: v.dtype for k, v in feeds.items()}
    exe = sym.simple_bind(mx.cpu(), grad_req="null", type_dict=type_dict, **{k: v.shape for k, v in feeds.items()})
    exe.copy_params_from(args, aux, allow_extra_params=True)
    for k, v in feeds.items():
        exe.arg_dict[k][:] = v
    exe.forward(is_train=False)
    return [o.asnumpy() for o in exe.outputs]


@contextlib.contextmanager
def server_for(prefix: str, shapes: Dict[str, Sequence[int]], cache_dir: str, dtypes=None,
               **options) -> Iterator:
    """A server on free ports for the checkpoint, its instances using ``cache_dir`` as plan cache."""
    needs_server()
    env = dict(SERVER_ENV, MXNET_TENSORRT_CACHE_DIR=cache_dir)
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        options.setdefault("grace_period_s", 5)
        opts = ServeOptions(http_port=0, grpc_port=0, metrics_port=0, **options)
        with running(prefix, 0, shapes, dtypes, opts, ready_timeout_s=180) as endpoints:
            mp.undo()
            yield endpoints


def assert_close(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def metric(text: str, name: str) -> float:
    """The sum of a Prometheus metric's samples in ``text`` (0 if absent)."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


@pytest.fixture(scope="module")
def tiny_cnn(tmp_path_factory) -> str:
    prefix = str(tmp_path_factory.mktemp("ckpt") / "tiny")
    small_cnn(prefix)
    return prefix
