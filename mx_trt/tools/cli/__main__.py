"""``python -m mx_trt.tools.cli``: the ``mxtrt`` command."""
import sys

from .main import main

sys.exit(main())
