# Licensed to the Apache Software Foundation (ASF) under one
# or more contributor license agreements.  See the NOTICE file
# distributed with this work for additional information
# regarding copyright ownership.  The ASF licenses this file
# to you under the Apache License, Version 2.0 (the
# "License"); you may not use this file except in compliance
# with the License.  You may obtain a copy of the License at
#
#   http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing,
# software distributed under the License is distributed on an
# "AS IS" BASIS, WITHOUT WARRANTIES OR CONDITIONS OF ANY
# KIND, either express or implied.  See the License for the
# specific language governing permissions and limitations
# under the License.

# Ported from apache/mxnet 1.4.1, tests/python/tensorrt/test_tensorrt_lenet5.py (the API of
# MXNet 1.3 and 1.4: mx.contrib.tensorrt.set_use_tensorrt and tensorrt_bind). Changed for a CPU
# machine with no network:
# - the context: mx.gpu(0) -> mx.cpu();
# - the data: scikit-learn's digits stand in for MNIST (tests.compat.standin.get_mnist), and the
#   LeNet-5 checkpoint that MXNet's CI made by running lenet5_train.py first is made by the fixture
#   below, which runs that script's code (lenet5_train.main) on the stand-in data, for 20 epochs
#   (see lenet5_train.py), so the checkpoint loaded is lenet5-0020;
# - num_ex, the number of test images, is the stand-in's 360 instead of MNIST's 10,000 (with
#   10,000 the last, padded batch would be counted as 128 images and the comparison with the
#   360 labels would fail);
# - check_tensorrt_installation() checks mx_trt's CPU backend instead of libnvinfer (common.py);
# - the TensorRT executor must have built engines and run them (tests.compat.engines), so that a
#   silent native bind cannot pass.
# The accuracy comparison and its tolerance (1e-2 percentage points) are the original's.

import os
import numpy as np
import mxnet as mx
import pytest
from tests.compat.engines import assert_engines_ran
from tests.compat.standin import get_mnist
from tests.compat.v14 import lenet5_train
from tests.compat.v14.common import *
from tests.compat.v14.lenet5_common import get_iters


@pytest.fixture(autouse=True)
def lenet5_checkpoint(monkeypatch, tmp_path):
    """What MXNet's CI did before these tests: `python tests/python/tensorrt/lenet5_train.py`."""
    monkeypatch.setenv("LENET_MODEL_DIR", str(tmp_path))
    lenet5_train.main()


def run_inference(sym, arg_params, aux_params, mnist, all_test_labels, batch_size, use_tensorrt):
    """Run inference with either MXNet or TensorRT"""
    mx.contrib.tensorrt.set_use_tensorrt(use_tensorrt)

    data_size = (batch_size,) + mnist['test_data'].shape[1:]
    if use_tensorrt:
        all_params = merge_dicts(arg_params, aux_params)
        executor = mx.contrib.tensorrt.tensorrt_bind(sym, ctx=mx.cpu(), all_params=all_params,
                                                     data=data_size,
                                                     softmax_label=(batch_size,),
                                                     grad_req='null',
                                                     force_rebind=True)
    else:
        executor = sym.simple_bind(ctx=mx.cpu(),
                                   data=data_size,
                                   softmax_label=(batch_size,),
                                   grad_req='null',
                                   force_rebind=True)
        executor.copy_params_from(arg_params, aux_params)

    # Get this value from all_test_labels
    # Also get classes from the dataset
    num_ex = len(all_test_labels)
    all_preds = np.zeros([num_ex, 10])
    test_iter = mx.io.NDArrayIter(mnist['test_data'], mnist['test_label'], batch_size)

    example_ct = 0

    for idx, dbatch in enumerate(test_iter):
        executor.arg_dict["data"][:] = dbatch.data[0]
        executor.forward(is_train=False)
        offset = idx*batch_size
        extent = batch_size if num_ex - offset > batch_size else num_ex - offset
        all_preds[offset:offset+extent, :] = executor.outputs[0].asnumpy()[:extent]
        example_ct += extent

    if use_tensorrt:
        assert_engines_ran(executor)

    all_preds = np.argmax(all_preds, axis=1)
    matches = (all_preds[:example_ct] == all_test_labels[:example_ct]).sum()

    percentage = 100.0 * matches / example_ct

    return percentage


def test_tensorrt_inference():
    """Run LeNet-5 inference comparison between MXNet and TensorRT."""
    original_try_value = mx.contrib.tensorrt.get_use_tensorrt()
    try:
        check_tensorrt_installation()
        mnist = get_mnist()
        num_epochs = 20
        batch_size = 128
        model_name = 'lenet5'
        model_dir = os.getenv("LENET_MODEL_DIR", "/tmp")
        model_file = '%s/%s-symbol.json' % (model_dir, model_name)
        params_file = '%s/%s-%04d.params' % (model_dir, model_name, num_epochs)

        _, _, _, all_test_labels = get_iters(mnist, batch_size)

        # Load serialized MXNet model (model-symbol.json + model-epoch.params)
        sym, arg_params, aux_params = mx.model.load_checkpoint(model_name, num_epochs)

        print("LeNet-5 test")
        print("Running inference in MXNet")
        mx_pct = run_inference(sym, arg_params, aux_params, mnist, all_test_labels,
                               batch_size=batch_size, use_tensorrt=False)

        print("Running inference in MXNet-TensorRT")
        trt_pct = run_inference(sym, arg_params, aux_params, mnist, all_test_labels,
                                batch_size=batch_size, use_tensorrt=True)

        print("MXNet accuracy: %f" % mx_pct)
        print("MXNet-TensorRT accuracy: %f" % trt_pct)

        assert abs(mx_pct - trt_pct) < 1e-2, \
            """Diff. between MXNet & TensorRT accuracy too high:
               MXNet = %f, TensorRT = %f""" % (mx_pct, trt_pct)
    finally:
        mx.contrib.tensorrt.set_use_tensorrt(original_try_value)


if __name__ == '__main__':
    import nose
    nose.runmodule()
