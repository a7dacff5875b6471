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

# Ported from apache/mxnet 1.4.1, tests/python/tensorrt/test_training_warning.py (MXNet 1.3/1.4:
# tensorrt_bind refuses to bind for training with a RuntimeError). Changed for a CPU machine with
# no network:
# - the context: mx.gpu(0) -> mx.cpu();
# - pretrained=True -> seeded weights (tests.compat.standin.seeded_net);
# - assertRaises comes from tests.compat.standin (the same contract as MXNet's tests/python/unittest/common.py's, on pytest.raises);
# - run_resnet returns the executor it binds, and the inference bind with TensorRT must have built
#   engines (tests.compat.engines; the original runs no forward, nor does this port).

import gluoncv
import mxnet as mx

from tests.compat.engines import assert_engines_built
from tests.compat.standin import assertRaises, seeded_net


def test_training_without_trt():
    run_resnet(is_train=True, use_tensorrt=False)


def test_inference_without_trt():
    run_resnet(is_train=False, use_tensorrt=False)


def test_training_with_trt():
    assertRaises(RuntimeError, run_resnet, is_train=True, use_tensorrt=True)


def test_inference_with_trt():
    executor = run_resnet(is_train=False, use_tensorrt=True)
    assert_engines_built(executor)


def run_resnet(is_train, use_tensorrt):
    original_trt_value = mx.contrib.tensorrt.get_use_tensorrt()
    try:
        mx.contrib.tensorrt.set_use_tensorrt(use_tensorrt)
        ctx = mx.cpu()
        batch_size = 1
        h = 32
        w = 32
        model_name = 'cifar_resnet20_v1'
        resnet = seeded_net(gluoncv.model_zoo.get_model(model_name, pretrained=False), model_name,
                            (batch_size, 3, h, w))
        data = mx.sym.var('data')
        out = resnet(data)
        softmax = mx.sym.SoftmaxOutput(out, name='softmax')
        if is_train:
            grad_req = 'write'
        else:
            grad_req = 'null'
        if use_tensorrt:
            all_params = dict([(k, v.data()) for k, v in resnet.collect_params().items()])
            return mx.contrib.tensorrt.tensorrt_bind(softmax, ctx=ctx, all_params=all_params,
                                              data=(batch_size, 3, h, w), softmax_label=(batch_size,),
                                              force_rebind=True, grad_req=grad_req)
        else:
            return softmax.simple_bind(ctx=ctx, data=(batch_size, 3, h, w), softmax_label=(batch_size,),
                                force_rebind=True, grad_req=grad_req)
    finally:
        mx.contrib.tensorrt.set_use_tensorrt(original_trt_value)


if __name__ == '__main__':
    import nose
    nose.runmodule()
