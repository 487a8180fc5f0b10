"""Test doubles shared by several test modules (imported as ``from doubles import ...``; pytest puts this
folder on ``sys.path``)."""

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
