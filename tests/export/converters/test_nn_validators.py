"""The nn converters' validators against MXNet 1.9.1: what is refused, and with which reason.

A refused node stays native, so each case checks the reason a user would read
(``tests.harness.mxcheck.reason_of`` on a small symbol, or the registry's ``check``
on a hand-built spec for attribute combinations MXNet's own shape inference
refuses). The accepting side of the same validators is asserted on every node of
the exported graphs in ``test_nn.py``.
"""
from __future__ import annotations

from typing import Any, Dict

import mxnet as mx
import pytest

from mx_trt.export.converters.registry import OpSpec, check
from tests.harness.mxcheck import reason_of

D = mx.sym.Variable("data")


def _ids(cases):
    return [c[0] for c in cases]


def make_spec(op: str, attrs: Dict[str, Any], in_shapes, out_shapes, dtype: str = "float32") -> OpSpec:
    """A hand-built spec, for attribute combinations MXNet's own shape inference refuses."""
    return OpSpec(
        name="n",
        op=op,
        attrs={k: str(v) for k, v in attrs.items()},
        in_shapes=tuple(tuple(s) for s in in_shapes),
        in_dtypes=(dtype,) * len(in_shapes),
        out_shapes=tuple(tuple(s) for s in out_shapes),
        out_dtypes=(dtype,) * len(out_shapes),
    )


# -- validators: what is refused, and why --------------------------------------------------

REJECT_CASES = [
    (
        "conv_nhwc",
        lambda: (mx.sym.Convolution(D, kernel=(3, 3), num_filter=2, layout="NHWC", name="c"), {"data": (1, 5, 5, 3)}),
        "layout NHWC is not supported, only NCHW",
    ),
    (
        "deconv_ndhwc",
        lambda: (mx.sym.Deconvolution(D, kernel=(2, 2, 2), num_filter=2, layout="NDHWC", name="d"), {"data": (1, 3, 3, 3, 2)}),
        "layout NDHWC is not supported, only NCDHW",
    ),
    (
        "pool_nhwc",
        lambda: (mx.sym.Pooling(D, kernel=(2, 2), layout="NHWC", name="p"), {"data": (1, 4, 4, 3)}),
        "layout NHWC is not supported, only NCHW",
    ),
    (
        "pool_max_window_only_padding",
        lambda: (mx.sym.Pooling(D, kernel=(2, 2), stride=(2, 2), pad=(1, 1), pooling_convention="full", name="p"), {"data": (1, 1, 5, 5)}),
        "covers only padding",
    ),
    (
        "pool_avg_excl_pad_ge_kernel",
        lambda: (
            mx.sym.Pooling(D, kernel=(2, 2), stride=(2, 2), pad=(2, 2), pool_type="avg", count_include_pad=False, name="p"),
            {"data": (1, 1, 4, 4)},
        ),
        "pad 2 >= kernel 2",
    ),
    (
        "pool_lp4",
        lambda: (mx.sym.Pooling(D, kernel=(2, 2), pool_type="lp", p_value=4, name="p"), {"data": (1, 1, 4, 4)}),
        "p_value=4 is not supported",
    ),
    (
        "softmax_float_length",
        lambda: (mx.sym.softmax(D, mx.sym.Variable("len"), use_length=True, axis=-1, name="s"), {"data": (2, 5), "len": (2,)}),
        "MXNet reads int32 or int64 lengths only",
    ),
    (
        "log_softmax_fp64_output",
        lambda: (mx.sym.log_softmax(D, dtype="float64", name="s"), {"data": (2, 5)}),
        "dtype float64",
    ),
    (
        "dropout_always",
        lambda: (mx.sym.Dropout(D, p=0.5, mode="always", name="dr"), {"data": (2, 3)}),
        "mode 'always'",
    ),
    (
        "layernorm_mean_var",
        lambda: (mx.sym.LayerNorm(D, output_mean_var=True, name="ln"), {"data": (2, 3)}),
        "output_mean_var=True is not supported",
    ),
    (
        "lrn_window_too_big",
        lambda: (mx.sym.LRN(D, nsize=17, name="lrn"), {"data": (1, 20, 2, 2)}),
        "nsize=17 exceeds TensorRT's LRN window limit",
    ),
    (
        "clip_inverted",
        lambda: (mx.sym.clip(D, a_min=1.0, a_max=0.0, name="cl"), {"data": (2, 3)}),
        "a_min=1.0 > a_max=0.0",
    ),
    (
        "upsampling_bilinear_num_filter",
        lambda: (mx.sym.UpSampling(D, scale=2, sample_type="bilinear", num_filter=2, name="up"), {"data": (1, 3, 2, 2)}),
        "num_filter equal to the channel count 3",
    ),
    (
        "pool_avg_incl_pad_ge_kernel",
        lambda: (mx.sym.Pooling(D, kernel=(2, 2), stride=(2, 2), pad=(2, 2), pool_type="avg", name="p"), {"data": (1, 1, 4, 4)}),
        "pad 2 >= kernel 2",
    ),
    (
        "softmax_output_4d_flat",
        lambda: (mx.sym.SoftmaxOutput(D, name="so"), {"data": (2, 3, 2, 2)}),
        "MXNet's CPU and GPU results differ",
    ),
    (
        "instance_norm_2d",
        lambda: (mx.sym.InstanceNorm(D, name="inorm"), {"data": (2, 3)}),
        "at least 3 dimensions",
    ),
    (
        "softmax_activation_channel_2d",
        lambda: (mx.sym.SoftmaxActivation(D, mode="channel", name="sa"), {"data": (2, 3)}),
        "at least 3 dimensions",
    ),
]


@pytest.mark.parametrize("name,build,expected", REJECT_CASES, ids=_ids(REJECT_CASES))
def test_validator_rejects(name, build, expected):
    sym, shapes = build()
    reason = reason_of(sym, shapes)
    assert reason is not None and expected in reason, reason


def test_validator_rejects_non_float():
    sym = mx.sym.BatchNorm(D, name="bn")
    reason = reason_of(sym, {"data": (2, 3, 4)}, {"data": "float64", "bn_gamma": "float64", "bn_beta": "float64"})
    assert reason is not None and "float64" in reason, reason


SPEC_REJECT_CASES = [
    # Combinations MXNet's own shape inference cannot even infer, checked on hand-built specs.
    ("pool_same", make_spec("Pooling", dict(kernel=(3,), stride=(2,), pooling_convention="same"), [(1, 1, 7)], [(1, 1, 4)]),
     "pooling_convention 'same' is not supported"),
    ("pool_type_unknown", make_spec("Pooling", dict(kernel=(2, 2), pool_type="median"), [(1, 1, 4, 4)], [(1, 1, 3, 3)]),
     "pool_type 'median' is not supported"),
    ("pool_wrong_out_shape", make_spec("Pooling", dict(kernel=(2, 2)), [(1, 1, 4, 4)], [(1, 1, 2, 2)]),
     "differs from the expected 3"),
    ("activation_unknown", make_spec("Activation", dict(act_type="swish"), [(2, 3)], [(2, 3)]), "act_type 'swish'"),
    ("leaky_unknown", make_spec("LeakyReLU", dict(act_type="mish"), [(2, 3)], [(2, 3)]), "act_type 'mish'"),
    ("conv_4d_kernel",
     make_spec("Convolution", dict(kernel=(1, 1, 1, 1), num_filter=1),
               [(1, 1, 2, 2, 2, 2), (1, 1, 1, 1, 1, 1), (1,)], [(1, 1, 2, 2, 2, 2)]),
     "only 1-D, 2-D and 3-D"),
    ("deconv_wrong_out_shape",
     make_spec("Deconvolution", dict(kernel=(3, 3), num_filter=2, stride=(2, 2)), [(1, 3, 4, 4), (3, 2, 3, 3)], [(1, 2, 10, 10)]),
     "cannot reproduce MXNet's output shape"),
    ("pad_unknown_mode",
     make_spec("Pad", dict(mode="symmetric", pad_width=(0, 0, 0, 0, 1, 1, 1, 1)), [(1, 1, 3, 3)], [(1, 1, 5, 5)]),
     "mode 'symmetric' is not supported"),
    ("pad_reflect_too_wide",
     make_spec("Pad", dict(mode="reflect", pad_width=(0, 0, 0, 0, 3, 0, 0, 0)), [(1, 1, 3, 3)], [(1, 1, 6, 3)]),
     "must be smaller than its size 3"),
    # (MXNet leaves the label shape of 1-D data unknown, so this is a hand-built spec.)
    ("softmax_output_1d", make_spec("SoftmaxOutput", dict(), [(5,), (1,)], [(5,)]), "MXNet's CPU and GPU results differ"),
    ("l2norm_channel_2d", make_spec("L2Normalization", dict(mode="channel"), [(2, 3)], [(2, 3)]),
     "mode 'channel' needs an input with at least 3 dimensions"),
    ("upsampling_nearest_uneven", make_spec("UpSampling", dict(scale=2, sample_type="nearest", num_args=2),
                                            [(1, 1, 2, 2), (1, 1, 2, 1)], [(1, 2, 4, 4)]),
     "is not upsampled by one integer factor"),
]


@pytest.mark.parametrize("name,spec,expected", SPEC_REJECT_CASES, ids=_ids(SPEC_REJECT_CASES))
def test_validator_rejects_spec(name, spec, expected):
    reason = check(spec)
    assert reason is not None and expected in reason, reason


def test_validator_accepts_model_zoo_ops():
    """The accepting side of the validators on the zoo combinations (no reason given)."""
    sym = mx.sym.Pooling(D, kernel=(3, 3), stride=(2, 2), pool_type="max", pooling_convention="full", name="p")
    assert reason_of(sym, {"data": (1, 2, 8, 8)}) is None
    sym = mx.sym.BatchNorm(D, fix_gamma=True, name="bn")
    assert reason_of(sym, {"data": (1, 2, 8, 8)}) is None
