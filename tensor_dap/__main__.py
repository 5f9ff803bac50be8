"""``python -m tensor_dap`` is ``tensor-dap``."""

import sys

from tensor_dap.cli import main

sys.exit(main())
