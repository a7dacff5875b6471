"""Front-ends: where a user's call becomes one :class:`mx_trt.pipeline.request.BindRequest`.

* :mod:`.hook` - patches ``Symbol.simple_bind`` (and ``Executor.copy_params_from``); reads the switch at every bind;
  runs the other front-ends' installers once mxnet is imported.
* :mod:`.mxnet_import` - a finder that waits for ``import mxnet`` to install the hook, without importing mxnet.
* :mod:`.common` - what they share: settings of one call, the backend, the fallback rule.
* :mod:`.simple_bind` - the accelerated ``simple_bind``: arguments read as MXNet reads them, fallback rules.
* :mod:`.symbol` - ``Symbol.optimize_for('TensorRT')`` and ``Symbol.bind``.
* :mod:`.module` - ``Module`` and ``BucketingModule``: engines built once the weights are known.
* :mod:`.gluon` - ``HybridBlock.hybridize(backend='TensorRT')``, ``optimize_for``, ``SymbolBlock``.
* :mod:`.contrib` - the ``mx.contrib.tensorrt``-style API (``tensorrt_bind``, ``set_use_fp16``, ...), ``refresh``, ``release``.
"""
