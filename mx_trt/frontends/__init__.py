"""Front-ends: where a user's call becomes one :class:`mx_trt.pipeline.request.BindRequest`.

* :mod:`.hook` - patches ``Symbol.simple_bind`` (and ``Executor.copy_params_from``); reads the switch at every bind.
* :mod:`.simple_bind` - the accelerated ``simple_bind``: arguments read as MXNet reads them, fallback rules.
* :mod:`.contrib` - the ``mx.contrib.tensorrt``-style API (``tensorrt_bind``, ``set_use_fp16``, ...).
"""
