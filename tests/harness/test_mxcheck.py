import mxnet as mx

from tests.harness.mxcheck import check_symbol


def test_relu_and_add():
    d = mx.sym.Variable("data")
    s = mx.sym.Activation(d, act_type="relu", name="r") + d
    check_symbol(s, {"data": (2, 3)})
