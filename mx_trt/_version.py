"""The plugin's version: a leaf module, read by setup.py without importing the package.

It keys the plan cache (:func:`mx_trt.builder.engines.converter_fingerprint`) and is
written into exports' manifests.
"""

__version__ = "0.1.0"
