"""Script your own env role: an imaginer in five lines that answers tool calls with data, in both modes.

``TinyBank.imagine`` computes each tool result from the call (``request.tool``, ``request.arguments``) and
returns it as data (a dict or a list); the env writes it in the format of the wrapper's ``mode``
(``<execution_result>`` tags in prompted mode, the bare tool message inline), so the script never looks at
``request.mode``. ``SelfRehearsalEnv`` puts it in the environment role of the builtin bank, and the oracle
plays one task's reference calls against it in a plain Gymnasium loop; the tiny bank holds that
customer's real balance, so the episode earns the full reward.

    python examples/scripted_env_role.py
"""

from __future__ import annotations

import gymnasium as gym

import envace_gym
from envace_gym.agents import OraclePolicy

#: The tiny bank the script imagines: (account_id, owner, type, balance), all in EUR.
ACCOUNTS = [("A-5203", "Hugo Duarte", "savings", 1200.0), ("A-7079", "Hugo Duarte", "checking", 3181.58)]
TASK = "bank-train-0000"  # "I'm Hugo Duarte. What's the balance of my checking account?"


class TinyBank:
    """A scripted env role: each result computed from the call, returned as data."""

    def imagine(self, request):
        args = request.arguments
        if request.tool == "find_accounts":
            return [{"account_id": a, "type": t, "currency": "EUR"} for a, o, t, _ in ACCOUNTS if o == args["owner"]]
        balance = next(b for a, _, _, b in ACCOUNTS if a == args["account_id"])
        return {"account_id": args["account_id"], "balance": balance, "currency": "EUR"}


def main() -> None:
    for mode in ("prompted", "inline"):
        env = envace_gym.SelfRehearsalEnv(gym.make("EnvACE-ToolCall-v0", suite="builtin/bank"), TinyBank(), mode=mode)
        policy = OraclePolicy(env.unwrapped.suite)  # replays the task's reference calls, then its answer
        obs, info = env.reset(options={"task_id": TASK})
        terminated = truncated = False
        written = []  # each answer as the env wrote it for the mode
        while not (terminated or truncated):
            obs, reward, terminated, truncated, info = env.step(policy.act(obs, info))
            written += [sample.text for sample in info["env_role_samples"]]
        print(f"{mode}: reward {reward:.1f}; the env role's last answer, as written: {written[-1]!r}")


if __name__ == "__main__":
    main()
