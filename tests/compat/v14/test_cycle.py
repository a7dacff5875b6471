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

# Ported from apache/mxnet 1.4.1, tests/python/tensorrt/test_cycle.py (MXNet 1.3/1.4: the pass
# runs in simple_bind when MXNET_USE_TENSORRT is set, and mx.contrib.tensorrt.get_optimized_symbol
# returns the executor's graph). Changed for a CPU machine:
# - the context: mx.gpu(0) -> mx.cpu();
# - MXNET_USE_TENSORRT=1 is set for the bind. The original relied on the environment: MXNet's CI
#   did not set it, so this test bound natively unless test_resnet18.py (which sets it and never
#   restores it) had run before it;
# - the executor must have built engines and run them (tests.compat.engines), and it runs one
#   forward for that (the original ran none).
# has_no_cycle is mended: MXNet's could only return True (its loop recursed only into nodes
# already visited, and none was at the start; its recursion passed the parent instead of the
# child; and it keyed nodes by handle values, which get_children makes anew at each call). The
# assertion is the original's; the check behind it is now a depth-first search by node name that
# fails on a back edge (test_has_no_cycle_can_fail below shows it can).

import mxnet as mx
from tests.compat.engines import assert_engines_ran
from tests.compat.v14.common import *


def has_no_cycle(sym, children=None):
    """True when no path from a node of ``sym`` comes back to it (``children``: node -> its inputs)."""
    if children is None:
        def children(s):
            kids = s.get_children()
            return [] if kids is None else list(kids)
    state = {}  # name -> 1 on the current path, 2 done

    def visit(s):
        if state.get(s.name) == 1:
            return False
        if state.get(s.name) == 2:
            return True
        state[s.name] = 1
        ok = all(visit(c) for c in children(s))
        state[s.name] = 2
        return ok

    return all(visit(s) for s in sym)


def test_has_no_cycle_can_fail():
    class Node:
        def __init__(self, name):
            self.name, self.inputs = name, []

    a, b, c = Node("a"), Node("b"), Node("c")
    a.inputs, b.inputs, c.inputs = [b], [c], [a]
    assert not has_no_cycle([a], children=lambda n: n.inputs)
    c.inputs = []
    assert has_no_cycle([a], children=lambda n: n.inputs)


def test_simple_cycle(monkeypatch):
    monkeypatch.setenv('MXNET_USE_TENSORRT', '1')
    inp = mx.sym.Variable('input', shape=[1,10])
    A = mx.sym.FullyConnected(data=inp, num_hidden=10, no_bias=False, name='A')
    B = mx.sym.FullyConnected(data=A, num_hidden=10, no_bias=False, name='B')
    D = mx.sym.sin(data=A, name='D')
    C = mx.sym.elemwise_add(lhs=B, rhs=D, name='C')
    arg_params = {
                'I_weight': mx.nd.zeros([10,10]),
                'I_bias': mx.nd.zeros([10]),
                'A_weight': mx.nd.zeros([10,10]),
                'A_bias': mx.nd.zeros([10]),
                'B_weight': mx.nd.zeros([10,10]),
                'B_bias': mx.nd.zeros([10]),
               }

    executor = C.simple_bind(ctx=mx.cpu(), data=(1,10), softmax_label=(1,),
                           shared_buffer=arg_params, grad_req='null', force_rebind=True)
    optimized_graph = mx.contrib.tensorrt.get_optimized_symbol(executor)
    assert has_no_cycle(optimized_graph), "The graph optimized by TRT contains a cycle"
    executor.forward(is_train=False, input=mx.nd.ones((1, 10)))
    assert_engines_ran(executor)


if __name__ == '__main__':
    import nose
    nose.runmodule()
