"""Test-time private rehearsal: rehearse a task in imagination within a budget, then act for real.

* `private`: `PrivateRehearsal`, a policy that wraps a policy and rehearses before it acts:
  ``use="memory"`` (it reads a memory of its rehearsals) or ``use="select"`` (before every turn it commits
  the first message of the rehearsal it chose, by agreement or by its own verdict);
* `verify`: `VerifiedCalls`, a policy whose state-changing calls its env role predicts before
  they are sent for real; a call predicted to fail is revised once;
* `memory`: the deterministic condensation of rehearsals into a bounded memory note, and of a
  rehearsal's first message into what select mode compares.
"""

from .memory import CallOutcome, RehearsalOutcome, condense, first_step, render_memory
from .private import PrivateRehearsal, rehearsal_tokens
from .verify import VerifiedCalls

__all__ = [
    "PrivateRehearsal",
    "VerifiedCalls",
    "rehearsal_tokens",
    "CallOutcome",
    "RehearsalOutcome",
    "condense",
    "first_step",
    "render_memory",
]
