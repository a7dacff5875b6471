"""Every architecture of ``mxnet.gluon.model_zoo.vision``, accelerated vs native.

Weights are random and seeded (no download); inputs are 64x64 where the
architecture allows (:data:`FIXED_SIZE`). fp32 tolerance for whole models:
``max|accelerated - native| <= 1e-4 + 1e-4 * max|native|`` elementwise-max over
the output (rounding from ~50-200 layers and from ONNX Runtime's different
convolution algorithms, relative to the output's range).
"""
from __future__ import annotations

import inspect
import re

import mxnet as mx
import numpy as np
import pytest

import mx_trt
from mxnet.gluon.model_zoo import vision

ZOO = [
    "alexnet",
    "densenet121", "densenet161", "densenet169", "densenet201",
    "inceptionv3",
    "mobilenet1.0", "mobilenet0.75", "mobilenet0.5", "mobilenet0.25",
    "mobilenetv2_1.0", "mobilenetv2_0.75", "mobilenetv2_0.5", "mobilenetv2_0.25",
    "resnet18_v1", "resnet34_v1", "resnet50_v1", "resnet101_v1", "resnet152_v1",
    "resnet18_v2", "resnet34_v2", "resnet50_v2", "resnet101_v2", "resnet152_v2",
    "squeezenet1.0", "squeezenet1.1",
    "vgg11", "vgg13", "vgg16", "vgg19", "vgg11_bn", "vgg13_bn", "vgg16_bn", "vgg19_bn",
]
RTOL, ATOL = 1e-4, 1e-4


def test_the_list_is_the_whole_zoo():
    # get_model keeps its table in a local dict: read the names from its source.
    names = set(re.findall(r"'([a-z0-9_.]+)'\s*:", inspect.getsource(vision.get_model)))
    assert names == set(ZOO)


#: Input sizes: the networks whose head pools a fixed window (DenseNet 7, Inception 8, SqueezeNet 13)
#: take their ImageNet size; the others (global pooling, or a Dense that infers its inputs: VGG,
#: AlexNet) take 64, with the same layers (VGG's first Dense then has 2048 inputs, not 25088).
FIXED_SIZE = {"densenet": 224, "inception": 299, "squeezenet": 224}
SMALL_SIZE = 64


def zoo_size(name: str) -> int:
    """The input size the suite runs model-zoo classifier ``name`` at (see :data:`FIXED_SIZE`)."""
    return next((v for k, v in FIXED_SIZE.items() if name.startswith(k)), SMALL_SIZE)


def imagenet_size(name: str) -> int:
    """The input size model-zoo classifier ``name`` was designed for: what the benchmarks run it at."""
    return 299 if name.startswith("inception") else 224


def zoo_model(name: str, seed: int = 0, size: int = 0):
    """(symbol, arg_params, aux_params, image size) with seeded random weights.

    ``size`` 0: :func:`zoo_size`. VGG's and AlexNet's weights depend on it.
    """
    mx.random.seed(seed)
    rng = np.random.RandomState(seed)
    net = vision.get_model(name, pretrained=False)
    net.initialize(mx.init.Xavier(magnitude=2.0))
    size = size or zoo_size(name)
    net(mx.nd.zeros((1, 3, size, size)))
    sym = net(mx.sym.var("data"))
    args, aux = {}, {}
    aux_names = set(sym.list_auxiliary_states())
    for pname, p in net.collect_params().items():
        v = p.data()
        if pname.endswith("running_var"):
            v = mx.nd.array(rng.uniform(0.5, 1.5, p.shape))
        elif pname.endswith("running_mean"):
            v = mx.nd.array(rng.uniform(-0.1, 0.1, p.shape))
        (aux if pname in aux_names else args)[pname] = v
    return sym, args, aux, size


@pytest.mark.slow
@pytest.mark.parametrize("name", ZOO)
def test_zoo_model(name, monkeypatch):
    sym, args, aux, size = zoo_model(name)
    params = {**args, **aux}
    for batch in (1, 4):
        shape = (batch, 3, size, size)
        x = np.random.RandomState(batch).uniform(-1, 1, shape).astype("float32")
        monkeypatch.setenv("MXNET_USE_TENSORRT", "0")
        ref_exe = sym.simple_bind(mx.cpu(), data=shape, grad_req="null")
        ref_exe.copy_params_from(args, aux)
        ref_exe.arg_dict["data"][:] = x
        ref_exe.forward(is_train=False)
        ref = ref_exe.outputs[0].asnumpy()
        del ref_exe

        monkeypatch.setenv("MXNET_USE_TENSORRT", "1")
        exe = sym.simple_bind(mx.cpu(), data=shape, grad_req="null", shared_buffer=params)
        info = mx_trt.bind_info(exe)
        assert info is not None
        # Every operator is inside an engine: one engine, only the data input left.
        assert info.plan.partition.native == {}, info.plan.partition.native
        assert len(info.engines) == 1 and not info.native_failures
        assert list(exe.arg_dict) == ["data"] and not exe.aux_dict
        exe.arg_dict["data"][:] = x
        exe.forward(is_train=False)
        got = exe.outputs[0].asnumpy()
        assert got.shape == ref.shape
        err = float(np.abs(got - ref).max())
        assert err <= ATOL + RTOL * float(np.abs(ref).max()), f"{name} batch {batch}: max abs error {err}"
        del exe
