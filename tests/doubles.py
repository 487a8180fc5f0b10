"""Test doubles shared by several test modules (imported as ``from doubles import ...``; pytest puts this
folder on ``sys.path``)."""

import socket

from envace_gym.calls import canonical_json


class Recording:
    """The real backend, with every call recorded as ``(name, canonical arguments)`` in a shared list."""

    def __init__(self, inner, calls):
        self.inner, self.calls = inner, calls

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def execute(self, call):
        self.calls.append((call.name, canonical_json(call.arguments)))
        return self.inner.execute(call)

    def copy(self):
        return Recording(self.inner.copy(), self.calls)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (for a process group's rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
