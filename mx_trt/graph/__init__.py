"""MXNet symbol -> typed IR (:mod:`mx_trt.passes.ir`), once per bind, and IR -> MXNet JSON.

* :mod:`.importer` - the import with MXNet's inferred shapes and dtypes, shape inference at another
  batch into the same IR, and the JSON writer of the optimized symbol.
"""
