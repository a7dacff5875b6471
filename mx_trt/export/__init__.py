"""IR subgraph -> ONNX, through the converter registry.

* :mod:`.spec` - :class:`~mx_trt.export.spec.OpSpec`, what a validator sees of one node (loads no converter).
* :mod:`.converters` - one converter and validator per MXNet operator, split by domain.
* :mod:`.subgraph` - one subgraph to one ONNX model (boundary, weights, external data).
* :mod:`.dynamic` - batch-dynamic export, checked by exporting at two batch sizes.
* :mod:`.precision` - fp16 weights and casts at the subgraph's edges.
* :mod:`.plugins` - :func:`~mx_trt.export.plugins.register_plugin`: your operator as one node of your own domain, implemented per backend.

Importing this package imports nothing; import the module you need.
"""
