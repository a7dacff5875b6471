"""The ``mxtrt`` command: one module per subcommand, the entry point in :mod:`.main`.

* :mod:`.options` - exit statuses, :class:`~.options.UsageError`, option parsing, settings and backend;
* :mod:`.checkpoint` - the checkpoint, its input shapes and arrays;
* :mod:`.binding` - native and accelerated binds, the whole-model engine;
* :mod:`.timing` - latencies, their statistics, a progress bar;
* :mod:`.partition`, :mod:`.verify`, :mod:`.bench`, :mod:`.build`, :mod:`.export` - the subcommands;
* :mod:`.main` - the argument parser, logging, exit statuses (``mxtrt``, ``python -m mx_trt.tools.cli``).
"""
