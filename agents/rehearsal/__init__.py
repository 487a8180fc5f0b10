"""Test-time private rehearsal: rehearse a task in imagination within a budget, then act once for real.

* :mod:`.private`: :class:`PrivateRehearsal`, a policy that wraps a policy and rehearses before it acts;
* :mod:`.memory`: the deterministic condensation of rehearsals into a bounded memory note.
"""

from .memory import CallOutcome, RehearsalOutcome, condense, render_memory
from .private import PrivateRehearsal, rehearsal_tokens

__all__ = ["PrivateRehearsal", "rehearsal_tokens", "CallOutcome", "RehearsalOutcome", "condense", "render_memory"]
