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

# Ported from apache/mxnet 1.4.1, tests/python/tensorrt/common.py. Changed for a CPU machine:
# - check_tensorrt_installation() looked for TensorRT's libnvinfer; the engines here come from
#   mx_trt's CPU backend, so it checks that this backend can be used.

from tests.compat.standin import check_cpu_backend


def check_tensorrt_installation():
    check_cpu_backend()


def merge_dicts(*dict_args):
    """Merge arg_params and aux_params to populate shared_buffer"""
    result = {}
    for dictionary in dict_args:
        result.update(dictionary)
    return result
