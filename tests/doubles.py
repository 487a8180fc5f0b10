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


def alternating_rewards(trajs) -> list[float]:
    """A scripted ``EnvACETrainer.score``: 1, 0, 1, 0, ... by the episode's position in the step. The trainer
    plays each group as ``group_size`` consecutive episodes, so with an even ``group_size`` every group gets
    rewards that differ (advantages +1 and -1), whatever the model sampled and on whatever CPU: every step has
    rows to train. It depends on the position only, so a resumed run scores its steps as an uninterrupted one."""
    return [float(i % 2) for i in range(len(trajs))]
