"""``python -m envace_gym.cli``: the same as the ``envace`` command."""

import sys

from . import main

sys.exit(main())
