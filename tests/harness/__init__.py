"""The test harness shared by every test folder: what a test compares against, and how.

- :mod:`tests.harness.mxcheck`: seeded random weights and inputs, a symbol run by
  native MXNet and by its whole ONNX export under ONNX Runtime, the per-precision
  tolerances (``OP_TOL``, ``MODEL_TOL``) and ``check_symbol``, which compares the two.
- :mod:`tests.harness.bindcheck`: a symbol bound natively and with the pass
  (``bind``), the outputs compared (``compare``), the subgraphs and native reasons
  of an accelerated executor, and the small ``conv_relu`` block most bind tests use.
- :mod:`tests.harness.int8check`: the INT8 tolerance (``COSINE_MIN``, ``TOP1_MIN``),
  tiny graphs exported as a bind exports them (``export_one``) and a small
  classifier with well separated classes (``prototype_cnn``).
- :mod:`tests.harness.userops`: a user's own Python custom operators
  (``user_square``, a doubling op) that no engine can run, so they stay native.

``tests/harness/test_mxcheck.py`` checks the harness itself on a small graph.
"""
