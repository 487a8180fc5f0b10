"""The native vector env (``gym.make_vec("EnvACE-ToolCall-v0")``), Gymnasium's sync/async vector envs over
``UnicodeText`` observations, env-role batching across envs, and ``collect()`` over a vector env."""

import json
import os
import signal
import threading

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

from envace_gym import SelfRehearsalEnv, ToolCall, format_calls
from envace_gym.agents.rollout import collect
from envace_gym.agents.rollout.remote import unbatch_info
from envace_gym.agents.scripted import OraclePolicy
from envace_gym.imagination import RealResultImaginer
from envace_gym.spaces import UnicodeText, fit_shared_text
from envace_gym.vector import ToolCallAsyncVectorEnv, ToolCallVectorEnv, WorkerDiedError, make_vector

BANK = {"suite": "builtin/bank", "split": "test"}
TASK = "bank-test-0008"  # "Could you check what account A-5247 currently holds?"
BALANCE = format_calls([ToolCall("get_balance", {"account_id": "A-5247"})])
# A tool error whose observation holds braces, quotes, an escaped quote and non-ASCII characters.
ODD = format_calls([ToolCall("get_balance", {"account_id": 'Ä-中"{x}'})])
ANSWER = "It holds 2215.70 EUR."


def _single(**kwargs):
    return gym.make("EnvACE-ToolCall-v0", **BANK, **kwargs)


def _vec(mode, n, **kwargs):
    if mode == "native":
        return gym.make_vec("EnvACE-ToolCall-v0", num_envs=n, **BANK, **kwargs)
    if mode == "processes":
        return gym.make_vec("EnvACE-ToolCall-v0", num_envs=n, asynchronous=True, **BANK, **kwargs)
    vector_kwargs = {"autoreset_mode": kwargs.pop("autoreset_mode")} if "autoreset_mode" in kwargs else None
    return gym.make_vec(
        "EnvACE-ToolCall-v0", num_envs=n, vectorization_mode=mode, vector_kwargs=vector_kwargs, **BANK, **kwargs
    )


MODES = ["native", "sync", "async", "processes"]


def test_make_vec_defaults_to_the_native_vector_env():
    vec = gym.make_vec("EnvACE-ToolCall-v0", num_envs=3, **BANK)
    try:
        assert isinstance(vec, ToolCallVectorEnv) and vec.num_envs == 3
        assert vec.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
        assert vec.single_observation_space == _single().observation_space
        assert vec.spec.kwargs["vectorization_mode"] == "vector_entry_point"
    finally:
        vec.close()


@pytest.mark.parametrize("mode", MODES)
def test_each_vectorization_steps_as_the_single_env_does(mode):
    """JSON observations (braces, quotes, non-ASCII) arrive intact and fresh at every step, in every mode."""
    single = _single()
    expected = [single.reset(seed=0, options={"task_id": TASK})[0]]
    expected += [single.step(a)[0] for a in (ODD, BALANCE)]
    _, reward, terminated, _, _ = single.step(ANSWER)
    vec = _vec(mode, 2)
    try:
        obs, info = vec.reset(seed=0, options={"task_id": TASK})
        seen = [tuple(obs)]
        for action in (ODD, BALANCE):
            seen.append(tuple(vec.step([action, action])[0]))
        _, rewards, terms, truncs, info = vec.step([ANSWER, ANSWER])
    finally:
        vec.close()
    assert seen == [(e, e) for e in expected]
    assert 'Ä-中\\"{x}' in seen[1][0]  # the escaped quote survived
    assert rewards.tolist() == [reward, reward] == [1.0, 1.0] and terms.all() and not truncs.any()
    assert terminated and info["task_id"].tolist() == [TASK, TASK] and info["_task_id"].all()


def test_per_env_task_ids_and_a_reset_mask():
    vec = _vec("native", 3)
    try:
        obs, info = vec.reset(seed=5, options={"task_id": ["bank-test-0001", None, TASK]})
        assert info["task_id"][0] == "bank-test-0001" and info["task_id"][2] == TASK
        assert obs[0] == _single().reset(options={"task_id": "bank-test-0001"})[0]
        assert obs[1] == _single().reset(seed=6)[0]  # env i of seed=5 resets with seed 5 + i, as Gymnasium's
        mask = np.array([False, True, False])
        obs2, info2 = vec.reset(options={"task_id": [None, TASK, None], "reset_mask": mask})
        assert obs2[0] == obs[0] and obs2[2] == obs[2] and obs2[1] == obs[2]
        assert info2["_task_id"].tolist() == [False, True, False] and info2["task_id"][1] == TASK
        with pytest.raises(ValueError, match="one per env"):
            vec.reset(options={"task_id": [TASK]})
    finally:
        vec.close()


def _run_autoreset(vec):
    """Env 0 ends at step 2 (answer), env 1 plays on; returns every step's outcome."""
    vec.reset(seed=3, options={"task_id": TASK})
    steps = []
    for actions in ([BALANCE, BALANCE], [ANSWER, ODD], ["next", ODD], ["next", ODD]):
        steps.append(vec.step(actions))
    vec.close()
    return steps


@pytest.mark.parametrize("autoreset", ["NextStep", "SameStep"])
def test_autoreset_mirrors_gymnasiums_sync_vector_env(autoreset):
    ours = _run_autoreset(_vec("native", 2, autoreset_mode=autoreset))
    theirs = _run_autoreset(_vec("sync", 2, autoreset_mode=autoreset))
    for (o1, r1, te1, tr1, i1), (o2, r2, te2, tr2, i2) in zip(ours, theirs, strict=True):
        assert tuple(o1) == tuple(o2) and r1.tolist() == r2.tolist()
        assert te1.tolist() == te2.tolist() and tr1.tolist() == tr2.tolist()
        assert sorted(i1) == sorted(i2) and i1["task_id"].tolist() == i2["task_id"].tolist()
    obs, rewards, terms, _, info = ours[1]
    assert terms.tolist() == [True, False] and rewards[0] == 1.0
    if autoreset == "NextStep":
        assert "final_obs" not in info and obs[0] == ""  # the episode's end; the reset comes next step
        obs, rewards, terms, _, info = ours[2]
        assert rewards[0] == 0.0 and not terms[0] and info["turn"][0] == 0 and obs[0]  # reset, action ignored
    else:
        assert info["_final_obs"].tolist() == [True, False] and info["final_obs"][0] == ""
        assert info["final_info"]["success"][0] and info["final_info"]["_success"].tolist() == [True, False]
        assert info["turn"][0] == 0 and obs[0]  # already the next episode's first observation


def test_autoreset_disabled_refuses_to_step_an_ended_env():
    vec = _vec("native", 2, autoreset_mode="Disabled")
    vec.reset(seed=0, options={"task_id": TASK})
    vec.step([ANSWER, BALANCE])
    with pytest.raises(RuntimeError, match=r"envs \[0\] ended"):
        vec.step([ANSWER, ANSWER])
    vec.reset(options={"reset_mask": np.array([True, False]), "task_id": [TASK, None]})
    assert vec.step([BALANCE, ANSWER])[2].tolist() == [False, True]
    vec.close()


# ------------------------------------------------------------------------- shared memory of long texts
class _Echo(gym.Env):
    """Observes whatever it is told to (up to a 40-character space)."""

    observation_space = UnicodeText(40)
    action_space = UnicodeText(1000)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return "", {}

    def step(self, action):
        return action, 0.0, False, False, {}


def test_async_shared_memory_keeps_any_string_and_cuts_overlong_ones_with_a_marker():
    odd = '{"a": "中文 ✓", "b": [1, {"c": "\\"q\\""}]}\n'
    long = "x" * 100
    vec = gym.vector.AsyncVectorEnv([_Echo, _Echo])  # Gymnasium's defaults: shared_memory=True
    try:
        vec.reset()
        obs = vec.step([odd, long])[0]
        assert obs[0] == odd
        assert obs[1] == "x" * 17 + "...[truncated 83 chars]"  # 40 characters, the marker counts what was cut
        assert isinstance(obs, tuple) and tuple(vec.step(["a", "b"])[0]) == ("a", "b")  # fresh every step
    finally:
        vec.close()
    assert fit_shared_text("abc", 3) == "abc" and len(fit_shared_text("y" * 1000, 30)) == 30


# ------------------------------------------------------------------------------- env-role batching
class EchoRole:
    """A deterministic env role: answers each call with its name and arguments; counts batched calls."""

    def __init__(self):
        self.batches = []
        self.singles = 0
        self.lock = threading.Lock()

    @staticmethod
    def answer(request):
        import json

        return (
            f"<execution_result>\n{json.dumps({'tool': request.tool, 'args': request.arguments})}\n</execution_result>"
        )

    def imagine_batch(self, requests):
        with self.lock:
            self.batches.append(len(requests))
        return [self.answer(r) for r in requests]

    def imagine(self, request):
        self.singles += 1
        return self.answer(request)


class OneByOne:
    """The same env role without ``imagine_batch``: it can only answer one call at a time."""

    def __init__(self):
        self.calls = 0

    def imagine(self, request):
        self.calls += 1
        return EchoRole.answer(request)


# Each starts with calls: 1 + 2 (parallel) + 1 + 1 in the first step, one each in the second.
TASKS = ["bank-test-0000", "bank-test-0001", "bank-test-0027", "bank-test-0005"]


def _play(vec_or_envs, suite, steps=4):
    """Oracle actors over a vector env, or over single envs stepped one by one; every step's outcome."""
    n = vec_or_envs.num_envs if isinstance(vec_or_envs, gym.vector.VectorEnv) else len(vec_or_envs)
    actors = [OraclePolicy(suite) for _ in range(n)]
    for a in actors:
        a.reset()
    if isinstance(vec_or_envs, gym.vector.VectorEnv):
        obs, info = vec_or_envs.reset(seed=0, options={"task_id": TASKS[:n]})
        infos = [{k: info[k][i] for k in ("messages", "tools", "turn", "task_id")} for i in range(n)]
    else:
        pairs = [e.reset(seed=i, options={"task_id": TASKS[i]}) for i, e in enumerate(vec_or_envs)]
        obs, infos = [p[0] for p in pairs], [p[1] for p in pairs]
    out = []
    for _ in range(steps):
        actions = [a.act(o, i) for a, o, i in zip(actors, obs, infos, strict=True)]
        if isinstance(vec_or_envs, gym.vector.VectorEnv):
            obs, rewards, terms, truncs, info = vec_or_envs.step(actions)
            infos = [{k: info[k][i] for k in ("messages", "tools", "turn", "task_id")} for i in range(n)]
        else:
            results = [e.step(a) for e, a in zip(vec_or_envs, actions, strict=True)]
            obs = [r[0] for r in results]
            rewards, terms = [r[1] for r in results], [r[2] for r in results]
            infos = [r[4] for r in results]
        out.append((list(obs), [float(r) for r in rewards], [bool(t) for t in terms]))
        if any(terms):  # compare only the first episode of each env
            break
    return out, [i["messages"] for i in infos]


def test_the_native_vector_env_sends_each_steps_env_role_as_one_batch_with_unchanged_results():
    role = EchoRole()
    # The echo breaks the tools' returns schemas: an error observation, so the episodes go on.
    imagination = {"on_invalid": "error_observation"}
    vec = gym.make_vec("EnvACE-ToolCall-v0", num_envs=4, backend="self", imaginer=role, imagination=imagination, **BANK)
    suite = vec.envs[0].unwrapped.suite
    batched, batched_messages = _play(vec, suite)
    vec.close()
    one = OneByOne()
    singles = [SelfRehearsalEnv(_single(), one, **imagination) for _ in range(4)]
    alone, alone_messages = _play(singles, suite)
    assert batched == alone and batched_messages == alone_messages
    assert "'args': {'owner': 'Bilal Okafor'}" in batched_messages[1][3]["content"]  # the env role answered
    assert role.singles == 0 and sum(role.batches) == one.calls >= 8
    # Step 1: every env's first call in one batch, then env 1's second parallel call (an env runs its calls
    # in order, so that one waits for its first); step 2: one call per env, one batch.
    assert role.batches[:3] == [4, 1, 4]
    assert all(e.get_wrapper_attr("imaginer") is role for e in vec.envs)  # the batcher was only borrowed


def test_built_envs_are_taken_as_they_are():
    role = EchoRole()
    built = [SelfRehearsalEnv(_single(), role, on_invalid="error_observation"), _single()]
    vec = ToolCallVectorEnv(built)
    assert vec.envs == built
    vec.reset(seed=0, options={"task_id": TASK})
    obs = vec.step([BALANCE, BALANCE])[0]
    assert role.singles == 0 and role.batches == [1]  # one env with this role: a batch of one
    assert '"tool": "get_balance"' in obs[0] and '"balance": 2215.7' in obs[1]  # imagined vs real
    vec.close()
    with pytest.raises(ValueError, match="at least one env"):
        ToolCallVectorEnv([])


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_gymnasiums_vector_envs_take_the_rehearsal_wrapper_through_wrappers(mode):
    """Gymnasium's way to wrap each env: a perfect env role answers, as the real backend would."""
    vec = gym.make_vec(
        "EnvACE-ToolCall-v0",
        num_envs=2,
        vectorization_mode=mode,
        wrappers=[lambda e: SelfRehearsalEnv(e, RealResultImaginer(e))],
        **BANK,
    )
    try:
        vec.reset(seed=0, options={"task_id": TASK})
        obs, _, _, _, info = vec.step([BALANCE, ODD])
    finally:
        vec.close()
    single = _single()
    single.reset(options={"task_id": TASK})
    assert obs[0] == single.step(BALANCE)[0]
    assert [[s.tool for s in r] for r in info["env_role_samples"]] == [["get_balance"], ["get_balance"]]  # imagined


def test_make_vector_says_what_an_imagined_backend_needs():
    with pytest.raises(ValueError, match="pass imaginer="):
        make_vector(2, backend="self", **BANK)
    with pytest.raises(ValueError, match="apply only to backend='self'"):
        make_vector(2, imaginer=EchoRole(), **BANK)
    vec = make_vector(2, backend="self-inline", imaginer=EchoRole(), imagination={"on_invalid": "error_observation"})
    assert [e.get_wrapper_attr("mode") for e in vec.envs] == ["inline", "inline"]
    assert vec.envs[0].get_wrapper_attr("on_invalid") == "error_observation"
    vec.close()


# ------------------------------------------------------------------------------------ collect()
@pytest.mark.parametrize("backend", ["real", "self"])
def test_collect_over_the_vector_env_equals_collect_over_a_list(backend):
    role = EchoRole()
    kwargs = {"backend": "self", "imaginer": role} if backend == "self" else {}
    vec = gym.make_vec("EnvACE-ToolCall-v0", num_envs=3, **BANK, **kwargs)
    suite = vec.envs[0].unwrapped.suite
    task_ids = TASKS + ["bank-test-0004", "bank-test-0005"]
    over_vec = collect(vec, [OraclePolicy(suite) for _ in range(3)], 6, task_ids=task_ids, progress=False)
    vec.close()
    envs = [_single() for _ in range(3)]
    if backend == "self":
        envs = [SelfRehearsalEnv(e, OneByOne()) for e in envs]
    over_list = collect(envs, [OraclePolicy(suite) for _ in range(3)], 6, task_ids=task_ids, progress=False)
    assert [t.episode for t in over_vec] == [t.episode for t in over_list]
    assert [t.task_id for t in over_vec] == task_ids
    if backend == "self":
        assert role.batches and max(role.batches) > 1 and role.singles == 0
        assert [len(t.env_role_samples) for t in over_vec] == [len(t.env_role_samples) for t in over_list]
    else:
        assert all(t.success for t in over_vec)


def test_collect_of_an_lm_policy_over_the_vector_env_equals_over_a_list():
    from envace_gym.agents.lm.engine import SamplingConfig
    from envace_gym.agents.lm.policy import tiny_policy

    policy = tiny_policy(sampling=SamplingConfig(temperature=0.0, max_new_tokens=12, seed=0))
    kwargs = {**BANK, "max_turns": 2}
    vec = gym.make_vec("EnvACE-ToolCall-v0", num_envs=2, backend="self-inline", imaginer=policy, **kwargs)
    over_vec = collect(vec, policy, 3, task_ids=TASKS, progress=False)
    vec.close()
    envs = [SelfRehearsalEnv(_single(max_turns=2), policy, mode="inline") for _ in range(2)]
    over_list = collect(envs, policy, 3, task_ids=TASKS, progress=False)
    assert [t.to_dict() for t in over_vec] == [t.to_dict() for t in over_list]
    assert all(t.actor_tokens > 0 for t in over_vec)


@pytest.mark.parametrize(
    ("mode", "autoreset"),
    [("async", "NEXT_STEP"), ("async", "SAME_STEP"), ("async", "DISABLED"), ("processes", "NEXT_STEP")],
)
def test_collect_over_a_process_vector_env_equals_collect_over_a_list(mode, autoreset):
    """Episodes start with masked resets on their own tasks and seeds; 5 episodes over 2 workers leave one
    worker idle at the end (stepped with the idle action, its result dropped)."""
    task_ids = TASKS + ["bank-test-0004", "bank-test-0005", "bank-test-0006"]
    suite = _single().unwrapped.suite
    over_list = collect([_single(), _single()], [OraclePolicy(suite), OraclePolicy(suite)], 5, task_ids=task_ids,
                        progress=False)  # fmt: skip
    kwargs = {} if mode == "processes" else {"autoreset_mode": AutoresetMode[autoreset]}
    vec = _vec(mode, 2, **kwargs)
    try:
        over_vec = collect(vec, [OraclePolicy(suite), OraclePolicy(suite)], 5, task_ids=task_ids, progress=False)
    finally:
        vec.close()
    assert [t.episode for t in over_vec] == [t.episode for t in over_list]
    assert [t.task_id for t in over_vec] == task_ids[:5] and all(t.success for t in over_vec)
    assert isinstance(over_vec[0].episode.calls_ok, int) and isinstance(over_vec[0].reward, float)  # not numpy
    json.dumps([t.to_dict() for t in over_vec])


def test_collect_of_an_lm_policy_over_a_process_vector_env_equals_over_a_list():
    from envace_gym.agents.lm.engine import SamplingConfig
    from envace_gym.agents.lm.policy import tiny_policy

    policy = tiny_policy(sampling=SamplingConfig(temperature=0.0, max_new_tokens=12, seed=0))
    vec = _vec("processes", 2, max_turns=2)
    try:
        over_vec = collect(vec, policy, 3, task_ids=TASKS, progress=False)
    finally:
        vec.close()
    over_list = collect([_single(max_turns=2), _single(max_turns=2)], policy, 3, task_ids=TASKS, progress=False)
    assert [t.to_dict() for t in over_vec] == [t.to_dict() for t in over_list]
    assert all(t.actor_tokens > 0 for t in over_vec)


def test_evaluate_takes_a_process_vector_env():
    from envace_gym.agents.eval.evaluate import evaluate

    suite = _single().unwrapped.suite
    vec = _vec("async", 2)
    try:
        report = evaluate(vec, [OraclePolicy(suite), OraclePolicy(suite)], 4, progress=False)
    finally:
        vec.close()
    single = evaluate(_single(), OraclePolicy(suite), 4, progress=False)
    assert [r.task_id for r in report.results] == [r.task_id for r in single.results]
    assert report.summary()["success_rate"] == 1.0


def test_collect_refuses_gymnasiums_next_step_worker_without_shared_memory():
    vec = gym.make_vec("EnvACE-ToolCall-v0", num_envs=2, vectorization_mode="async",
                       vector_kwargs={"shared_memory": False}, **BANK)  # fmt: skip
    suite = _single().unwrapped.suite
    try:
        with pytest.raises(ValueError, match="shared_memory=False"):
            collect(vec, [OraclePolicy(suite), OraclePolicy(suite)], 1, progress=False)
    finally:
        vec.close()


def test_unbatch_info_gives_back_each_envs_own_python_values():
    vec = _vec("sync", 2)
    try:
        _, infos = vec.reset(seed=0, options={"task_id": TASK})
        _, _, _, _, infos = vec.step([BALANCE, "done"])
    finally:
        vec.close()
    single = _single()
    single.reset(seed=0, options={"task_id": TASK})
    _, _, _, _, expected = single.step(BALANCE)
    mine = unbatch_info(infos, 0)
    assert mine["call_counts"] == expected["call_counts"] and type(mine["call_counts"]["ok"]) is int
    assert mine["messages"] == expected["messages"] and mine["turn"] == expected["turn"]
    assert "final_obs" not in mine and unbatch_info(infos, 1)["turn"] == 1


# ------------------------------------------------------------------------------------- dead workers
# A call that hung would fail these tests through pytest-timeout (a hang guard, not a speed goal).
HANG_GUARD = pytest.mark.timeout(120)


@HANG_GUARD
@pytest.mark.parametrize("when", ["before_step", "during_step"])
def test_a_killed_worker_raises_a_clear_error_in_the_parent(when):
    vec = _vec("processes", 2)
    assert isinstance(vec, ToolCallAsyncVectorEnv)
    vec.reset(seed=0, options={"task_id": TASK})
    pid = vec.processes[1].pid
    if when == "during_step":  # stopped first, so that it dies with the step in flight, not after it
        os.kill(pid, signal.SIGSTOP)
        vec.step_async([BALANCE, BALANCE])
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(WorkerDiedError) as died:
        vec.step_wait() if when == "during_step" else vec.step([BALANCE, BALANCE])
    assert f"worker 1 (pid {pid}) died (killed by signal {int(signal.SIGKILL)})" in str(died.value)
    assert vec.closed


@HANG_GUARD
def test_gymnasiums_own_async_vector_env_does_not_hang_on_a_killed_worker():
    vec = _vec("async", 2)
    vec.reset(seed=0)
    os.kill(vec.processes[0].pid, signal.SIGKILL)
    vec.processes[0].join(10)
    with pytest.raises((OSError, EOFError)):
        vec.step([BALANCE, BALANCE])
    vec.close(terminate=True)


class _Stuck(gym.Env):
    """An env whose step never returns in time when told to (a tool stuck in native code, say)."""

    observation_space = gym.spaces.Discrete(2)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return 0, {}

    def step(self, action):
        if action == 1:
            import time

            time.sleep(600)
        return 0, 0.0, False, False, {}


@HANG_GUARD
def test_a_stuck_worker_is_detected_by_the_timeout_and_terminated():
    from envace_gym.vector import WorkerTimeoutError

    vec = ToolCallAsyncVectorEnv([_Stuck, _Stuck], worker_timeout=3)
    vec.reset(seed=0)
    vec.step([0, 0])  # answered in time: no error
    processes = list(vec.processes)
    with pytest.raises(WorkerTimeoutError, match=r"worker\(s\) \[1\]"):
        vec.step([0, 1])
    assert vec.closed
    for process in processes:
        process.join(10)
        assert not process.is_alive()


class _StuckCall(_Stuck):
    """An env whose method ``wait`` never returns in time where ``hangs`` is set."""

    hangs = False

    def wait(self):
        if self.hangs:
            import time

            time.sleep(600)
        return "done"


@HANG_GUARD
def test_a_call_stuck_in_one_worker_names_that_worker():
    from envace_gym.vector import WorkerTimeoutError

    vec = ToolCallAsyncVectorEnv([_StuckCall, _StuckCall, _StuckCall], worker_timeout=3)
    assert vec.call("wait") == ("done", "done", "done")
    vec.set_attr("hangs", [False, True, False])  # one value per worker
    assert vec.get_attr("hangs") == (False, True, False)
    with pytest.raises(ValueError, match="use step"):
        vec.call("step", 0)
    with pytest.raises(WorkerTimeoutError, match=r"worker\(s\) \[1\] did not answer") as stuck:
        vec.call("wait")
    assert stuck.value.workers == [1] and vec.closed


@HANG_GUARD
def test_the_process_vector_env_works_under_the_spawn_start_method():
    """The workers' busy bytes reach a spawned worker (pickled by name), and its half-step gets its action."""
    import functools

    from envace_gym.agents.rollout.remote import RemoteEnvs
    from envace_gym.compose import make_env

    build = functools.partial(make_env, "EnvACE-ToolCall-v0", **BANK)  # importable: a spawned worker unpickles it
    vec = ToolCallAsyncVectorEnv([build], context="spawn", worker_timeout=60)
    try:
        vec.reset(seed=0, options={"task_id": TASK})
        assert '"balance": 2215.7' in vec.step([BALANCE])[0][0]
        vec.reset(seed=0, options={"task_id": TASK})
        (pending,) = RemoteEnvs(vec).begin_steps([0], [BALANCE])
        assert pending.requests == [] and vec.busy_workers() == []
    finally:
        vec.close()


class _Infos(gym.Env):
    """Gives infos of every kind that Gymnasium batches differently; env 1 has a key of its own."""

    observation_space = gym.spaces.Discrete(2)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, k):
        self.k = k

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.k, {"k": self.k}

    def step(self, action):
        info = {"k": self.k, "x": 0.5, "ok": True, "n": np.int64(3), "arr": np.full(2, self.k), "text": "t",
                "nested": {"a": self.k, "b": {"c": "d"}}, **({"only_1": [1]} if self.k else {})}  # fmt: skip
        return self.k, float(self.k), bool(action), False, info


def _assert_same_infos(ours, theirs):
    assert sorted(ours) == sorted(theirs)
    for key, value in ours.items():
        if isinstance(value, dict):
            _assert_same_infos(value, theirs[key])
        else:
            assert value.dtype == theirs[key].dtype and value.tolist() == theirs[key].tolist(), key


@pytest.mark.parametrize("autoreset", list(AutoresetMode))
def test_the_native_vector_env_batches_infos_and_steps_as_gymnasiums_sync_vector_env(autoreset):
    ours = ToolCallVectorEnv([lambda: _Infos(0), lambda: _Infos(1)], autoreset_mode=autoreset)
    theirs = gym.vector.SyncVectorEnv([lambda: _Infos(0), lambda: _Infos(1)], autoreset_mode=autoreset)
    assert ours.metadata["autoreset_mode"] == theirs.metadata["autoreset_mode"] == autoreset
    assert ours.observation_space == theirs.observation_space and ours.action_space == theirs.action_space
    (o1, i1), (o2, i2) = ours.reset(seed=1), theirs.reset(seed=1)
    assert o1.tolist() == o2.tolist() and ours.np_random_seed == theirs.np_random_seed
    _assert_same_infos(i1, i2)
    for actions in ([0, 1], [0, 0], [1, 0]):
        if autoreset == AutoresetMode.DISABLED and actions == [0, 0]:  # env 1 ended: reset it by hand
            mask = np.array([False, True])
            (o1, i1), (o2, i2) = ours.reset(options={"reset_mask": mask}), theirs.reset(options={"reset_mask": mask})
            assert o1.tolist() == o2.tolist()
            _assert_same_infos(i1, i2)
        a, b = ours.step(np.array(actions)), theirs.step(np.array(actions))
        assert all(x.tolist() == y.tolist() for x, y in zip(a[:4], b[:4], strict=True))
        _assert_same_infos(a[4], b[4])
    ours.set_attr("k", [5, 6])
    assert ours.get_attr("k") == (5, 6) and ours.call("step", 0)[1][1] == 6.0
    ours.close()
    theirs.close()


def test_worker_timeout_needs_worker_processes():
    with pytest.raises(ValueError, match="asynchronous=True"):
        gym.make_vec("EnvACE-ToolCall-v0", num_envs=2, worker_timeout=5, **BANK)
