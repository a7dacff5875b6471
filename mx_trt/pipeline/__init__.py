"""The stages of one bind, in order, from a :class:`~mx_trt.pipeline.request.BindRequest`.

* :mod:`.request` - the request every front-end builds.
* :mod:`.plan` - import the graph once, simplify, decide support, partition.
* :mod:`.weights` - digests over the caller's memory; numpy copies only when an export needs them.
* :mod:`.bind` - engines for the subgraphs, fused nodes, and MXNet's own bind of the optimized symbol.
"""
