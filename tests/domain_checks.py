"""Checks shared by the builtin domains' tests: replaying a task's reference on a fresh real backend."""

from envace_gym.rewards import EpisodeRecord, score_episode


def reference_hash(task, make_backend):
    """State hash after the reference calls on a fresh backend; every reference call must succeed."""
    backend = make_backend(timeout=None)
    backend.reset(task, seed=0)
    for ref in task.reference_calls:
        assert backend.execute(ref.call).ok, (task.id, ref)
    return backend.state_hash()


def score(task, calls, answers, final_hash, make_backend):
    """The task's reward for these successful calls, per-turn answers and final state hash."""
    reward, _ = score_episode(
        task,
        EpisodeRecord(calls, turn_answers=answers, final_state_hash=final_hash),
        expected_state_hash=lambda: reference_hash(task, make_backend),
    )
    return reward
