"""What the RL-library adapters share: which roles a row trains, and a trajectory cut into one row (the prompt
tokens, then the completion with its loss mask and logprobs), all from the trajectory's role tags.

TRL calls the mask ``env_mask`` (`trl`), verl ``response_mask`` (`verl`); both are the same list.
"""

from __future__ import annotations

from collections.abc import Sequence

from envace_gym.agents.rollout import Trajectory
from envace_gym.backends.spec import SELF_INLINE, SELF_KINDS

__all__ = ["split_trajectory", "trained_roles"]


def trained_roles(backend: str, train_env_role: bool, library: str) -> tuple[str, ...]:
    """The roles whose tokens a row trains: the actor's, and with ``train_env_role`` the inline env role's.

    One episode is one row in these libraries, so only an inline env role (``self-inline``, whose answers sit
    in the actor's own stream) can be trained there; ``library`` names the caller in the error.
    """
    if not train_env_role:
        return ("actor",)
    if backend in SELF_KINDS and backend != SELF_INLINE:
        raise ValueError(
            f"train_env_role needs backend='self-inline' under {library}: prompted env-role samples are rows of "
            f"their own, which {library}'s one row per episode cannot take (use EnvACETrainer for backend='self')"
        )
    if backend not in SELF_KINDS:
        raise ValueError(f"train_env_role needs an imagined backend ('self-inline'), not {backend!r}")
    return ("actor", "env_role")


def split_trajectory(traj: Trajectory, trained_roles: Sequence[str], max_completion: int | None = None) -> dict:
    """One row of a trajectory: the leading ``prompt`` tokens, the rest as the completion, and its
    ``env_mask`` (1 on ``trained_roles``) and logprobs, all from the role tags, cut to ``max_completion``."""
    n_prompt = next((i for i, r in enumerate(traj.roles) if r != "prompt"), len(traj.roles))
    if "prompt" in traj.roles[n_prompt:]:
        raise ValueError(f"trajectory {traj.task_id}: prompt tokens after the first generated token")
    mask = traj.mask(*trained_roles)[n_prompt:]
    completion = list(traj.token_ids[n_prompt:])
    logprobs = list(traj.logprobs[n_prompt:])
    if max_completion is not None:  # every list cut together: the libraries pad them side by side (trl #5144)
        completion, mask, logprobs = completion[:max_completion], mask[:max_completion], logprobs[:max_completion]
    return {
        "prompt_ids": list(traj.token_ids[:n_prompt]),
        "completion_ids": completion,
        "env_mask": mask,
        "logprobs": logprobs,
    }
