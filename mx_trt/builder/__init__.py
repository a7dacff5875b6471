"""Engines: backends, profiles, and getting an engine for a subgraph.

* :mod:`.backends` - ONNX Runtime, TensorRT and TensorRT-RTX behind one :class:`~mx_trt.builder.backends.base.Backend` interface.
* :mod:`.profiles` - the batch ranges a bind asks for.
* :mod:`.engines` - reuse an engine from this process, load it from the plan cache, or build it.
* :mod:`.progress` - build progress on the log.
"""
