"""What a user runs around a bind, not the bind itself.

* :mod:`mx_trt.tools.cli` - the ``mxtrt`` command (``partition``, ``verify``,
  ``bench``, ``build``, ``export``), one module per subcommand;
* :mod:`mx_trt.tools.report` - the partition report of a plan: its model, the
  text and JSON views, the SVG/HTML drawing;
* :mod:`mx_trt.tools.demo` - the main job (``make demo``).

The tools import the pipeline (``bind``, ``engines``, ``export``...); nothing
in the pipeline imports the tools.
"""
