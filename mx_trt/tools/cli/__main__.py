"""``python -m mx_trt.tools.cli``: the ``mxtrt`` command."""
import sys

from mx_trt.tools.cli.main import main

sys.exit(main())
