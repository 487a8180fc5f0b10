"""The call ledger: how many tool calls this process ran on real backends, and why.

Training reports it per step so that "pure imagination spends no live tool call" is measured, not assumed.
Every booking names a *kind*:

* ``live``: a call executed on a real backend during an episode (the env's real backend, a replay cache's
  fallback, the shadow real backend of grounded imagination, a scripted env role that asks the real tools);
* ``logged``: a result taken from a recorded log (a replay cache hit, or a tool log's entry that grounds an
  imagined call); no tool ran for it;
* ``verifier``: a call replayed on a fresh real backend only to compute a reward (``state_match``'s reference
  and final states); the agent never sees its result;
* ``diagnostic``: calls made by a diagnostic that training never uses (the trainer's ``sim_to_real``).

Who books: the env books ``live`` for each call its backend executed, unless the backend is
*self-accounting* (its class sets ``self_accounting = True``: `ReplayBackend`,
`ImaginedBackend`), in which case the backend books its own calls, since only it
knows which of them reached a real tool. `replayed_state_hash` books ``verifier``.

Inside ``with charged_as("diagnostic"):`` every booking made *in this thread* goes to that kind instead,
so a diagnostic can run the ordinary env code and still be told apart. Threads started inside the block are
not covered (the override is thread-local on purpose: rollouts step envs in worker threads concurrently).

Inside ``with tally(counts):`` every booking made in this thread is also added to ``counts`` (after any
`charged_as`): the env tallies each episode's bookings this way (``info["call_counts"]``), so an evaluation
reports them per episode without counting twice.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["CALL_KINDS", "CallLedger", "LEDGER", "charged_as", "is_self_accounting", "tally"]

CALL_KINDS = ("live", "logged", "verifier", "diagnostic")


class _ThreadState(threading.local):
    """One thread's view of the ledger: its `charged_as` override and its open tallies. The class attributes
    are every thread's starting values (a plain ``threading.local`` read with ``getattr(..., default)`` raised
    and caught an AttributeError at every booking)."""

    kind: str | None = None
    tallies: tuple[dict[str, int], ...] = ()


class CallLedger:
    """Thread-safe counts of tool calls by kind (see the module docstring). Read it with `snapshot`
    and subtract two snapshots for the calls of an interval; counts are never reset."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(CALL_KINDS, 0)
        self._local = _ThreadState()

    def record(self, kind: str, n: int = 1) -> None:
        """Book ``n`` calls as ``kind`` (or as the kind of an enclosing `charged_as` in this thread)."""
        if kind not in self._counts:
            raise ValueError(f"unknown call kind {kind!r}; kinds: {', '.join(CALL_KINDS)}")
        local = self._local
        kind = local.kind or kind
        with self._lock:
            self._counts[kind] += n
        for counts in local.tallies:
            counts[kind] = counts.get(kind, 0) + n

    def snapshot(self) -> dict[str, int]:
        """The counts so far, by kind (a copy)."""
        with self._lock:
            return dict(self._counts)

    @contextmanager
    def charged_as(self, kind: str) -> Iterator[None]:
        """Inside the block, every booking made in this thread is booked to ``kind``."""
        if kind not in self._counts:
            raise ValueError(f"unknown call kind {kind!r}; kinds: {', '.join(CALL_KINDS)}")
        outer = self._local.kind
        self._local.kind = kind
        try:
            yield
        finally:
            self._local.kind = outer

    def tally(self, counts: dict[str, int]) -> _Tally:
        """Inside the block, every booking made in this thread is also added to ``counts`` (by kind, as
        booked); the block gets ``counts``. Tallies nest: an inner one does not hide the bookings from an
        outer one."""
        return _Tally(self._local, counts)


class _Tally:
    """`CallLedger.tally`'s block. A class, not ``@contextmanager``: the env opens one on every step, and a
    generator-based block costs a plain step several percent."""

    __slots__ = ("_local", "_counts", "_outer")

    def __init__(self, local: _ThreadState, counts: dict[str, int]) -> None:
        self._local, self._counts = local, counts

    def __enter__(self) -> dict[str, int]:
        self._outer = self._local.tallies
        self._local.tallies = (*self._outer, self._counts)
        return self._counts

    def __exit__(self, *exc: object) -> None:
        self._local.tallies = self._outer


#: The process-wide ledger every backend and env books to.
LEDGER = CallLedger()


def charged_as(kind: str) -> Any:
    """``LEDGER.charged_as(kind)``: book this thread's calls inside the block to ``kind``."""
    return LEDGER.charged_as(kind)


def tally(counts: dict[str, int]) -> Any:
    """``LEDGER.tally(counts)``: also add this thread's bookings inside the block to ``counts``."""
    return LEDGER.tally(counts)


def is_self_accounting(backend: Any) -> bool:
    """True when ``backend`` books its own calls (so the env must not book them as ``live`` again)."""
    return bool(getattr(backend, "self_accounting", False))
