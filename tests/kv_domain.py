"""A tiny key-value toolkit used by the core tests (with tools that crash, hang or return non-JSON)."""

import threading
import time

from envace_gym.backends import PythonBackend, Toolkit, register_backend, tool
from envace_gym.tasks import RefCall, RefTurn, Task

HANG_FINISHED = threading.Event()  # set when put_then_hang's sleep is over


class KVToolkit(Toolkit):
    @tool
    def put(self, key: str, value: int) -> dict:
        """Store a value.

        Args:
            key: The key.
            value: The value.
        """
        self.state.setdefault("data", {})[key] = value
        return {"stored": key}

    @tool
    def get(self, key: str) -> dict:
        """Read a value.

        Args:
            key: The key.
        """
        data = self.state.get("data", {})
        if key not in data:
            raise ValueError(f"no key {key!r}")
        return {"key": key, "value": data[key]}

    @tool
    def put_then_crash(self, key: str) -> dict:
        """Writes, then raises: the write must be rolled back.

        Args:
            key: The key.
        """
        self.state.setdefault("data", {})[key] = -1
        raise RuntimeError("boom")

    @tool
    def put_then_hang(self, key: str, seconds: float = 2.0) -> dict:
        """Writes, then sleeps past any sane timeout.

        Args:
            key: The key.
            seconds: How long to sleep.
        """
        self.state.setdefault("data", {})[key] = -2
        time.sleep(seconds)
        self.state["data"][key] = -3
        HANG_FINISHED.set()
        return {"late": True}

    @tool
    def hold_memory(self, megabytes: int) -> dict:
        """Allocates (and holds) a block of memory.

        Args:
            megabytes: How much.
        """
        self.block = bytearray(megabytes * 1024 * 1024)
        return {"allocated": megabytes}

    @tool
    def shout(self, text: str) -> dict:
        """Prints to stdout (from Python and at the file-descriptor level) before answering.

        Args:
            text: What to print.
        """
        import os

        print(text, flush=True)
        os.write(1, (text + "\n").encode())
        return {"shouted": True}

    @tool
    def mangle(self, items: list) -> dict:
        """Mutates its own argument, then answers.

        Args:
            items: Anything.
        """
        items.append("mangled")
        items[0] = None
        return {"n": len(items)}

    @tool
    def not_json(self) -> dict:
        """Returns something that is not JSON."""
        return {"x": object()}


def make_backend(**kwargs):
    return PythonBackend(KVToolkit, **kwargs)


register_backend("test/kv", make_backend, overwrite=True)


def kv_task(task_id="kv-1", turns=1, reward=("call_match", "state_match", "answer_match")):
    """Put a value, read it back; with turns=2 a follow-up put."""
    tools = tuple(s.to_openai() for s in KVToolkit.tool_specs())
    ref = [
        RefTurn(
            steps=(
                (RefCall("put", {"key": "a", "value": 7}, {"stored": "a"}),),
                (RefCall("get", {"key": "a"}, {"key": "a", "value": 7}),),
            ),
            answer="a is 7",
            answer_contains=("7",),
        )
    ]
    user = ["Store 7 under a, then read it back."]
    if turns == 2:
        ref.append(
            RefTurn(
                steps=((RefCall("put", {"key": "b", "value": 8}, {"stored": "b"}),),),
                answer="b stored: 8",
                answer_contains=("8",),
            )
        )
        user.append("Also store 8 under b.")
    return Task(
        id=task_id,
        user_turns=tuple(user),
        tools=tools,
        backend="test/kv",
        initial_state={"data": {"z": 1}},
        reference=tuple(ref),
        reward=tuple(reward),
        domain="kv",
        split="test",
    )
