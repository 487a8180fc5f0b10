"""Deprecated alias of `envace_gym.imagination` (the env role's package), kept for one release.

The env role's package was called ``envace_gym.rehearsal``, a name it shared with test-time rehearsal
(``envace_gym.agents.rehearsal``). Importing it, or any of its modules, warns and gives the module of
`envace_gym.imagination` itself (the same objects, so ``isinstance`` checks hold).
"""

import importlib
import sys
import warnings

from envace_gym.imagination import *  # noqa: F403 - the alias re-exports everything
from envace_gym.imagination import __all__  # noqa: F401

warnings.warn(
    "envace_gym.rehearsal is deprecated: import envace_gym.imagination (the env role's package); "
    "the alias goes in the next release",
    DeprecationWarning,
    stacklevel=2,
)

# `import envace_gym.rehearsal.halfstep` (and the rest) find the new modules themselves.
for _name in ("backend", "fidelity", "fork", "halfstep", "prompt", "protocol", "user", "wrapper"):
    sys.modules[f"{__name__}.{_name}"] = importlib.import_module(f"envace_gym.imagination.{_name}")
