"""MXNet's own TensorRT test suite (``tests/python/tensorrt/`` in apache/mxnet), ported to a CPU machine.

One package per API generation, one file per original file:

- ``v14``: tag 1.4.1 (``mx.contrib.tensorrt.tensorrt_bind``, ``set_use_tensorrt``), the API of 1.3 and 1.4;
- ``v15``: tag 1.5.1, the two files that 1.6 dropped (``get_backend_symbol`` + ``init_tensorrt_params``);
- ``v17``: tag 1.7.0, the API of 1.5 to 1.7 (``get_backend_symbol``, ``init_tensorrt_params``, ``set_use_fp16``);
- ``v191``: tag 1.9.1 (``optimize_for('TensorRT', args=, aux=, ctx=, precision=, calibration_iters=)``).

Each file says at its top what was changed for the CPU and why. The shared
stand-ins (data, weights, the backend check) are in :mod:`tests.compat.standin`;
:mod:`tests.compat.engines` checks that the TensorRT path really built and ran
engines, so that a silent native bind fails the tests.
"""
