"""The public seams: fork(), the backend given at reset, wrappers that do not patch what they wrap,
the reward-basis registry, the one backend-spec parser, the one evaluation order, the env's call counts,
and the import layering (the core never imports agents or envs)."""

from __future__ import annotations

import ast
import copy
import re
from pathlib import Path

import gymnasium as gym
import pytest

import envace_gym
from envace_gym import SelfRehearsalEnv, Task, ToolCall, format_calls
from envace_gym.agents.scripted import OraclePolicy
from envace_gym.backends import BackendCopyError, BackendSpec, make_backend, parse_backend_spec
from envace_gym.backends.mcp import MCPBackend
from envace_gym.backends.spec import IMAGINED_KINDS, SELF_KINDS
from envace_gym.compose import env_role_for
from envace_gym.imagination import RealResultImaginer
from envace_gym.rewards import register_reward_basis, reward_bases

ROOT = Path(__file__).resolve().parent.parent


def _oracle_actions(env) -> list[str]:
    base = env.unwrapped
    return OraclePolicy(base.suite).plan(base.task)


def _first_mutating_task(domain: str) -> Task:
    """A test task of ``domain`` whose reference changes state (so a fork can diverge)."""
    suite = envace_gym.load_suite(f"builtin/{domain}").filter(split="test")
    for task in suite:
        backend = make_backend(task.backend, timeout=None)
        backend.reset(task)
        before = backend.state_hash()
        for ref in task.reference_calls:
            backend.execute(ref.call)
        if backend.state_hash() != before and len(task.reference_calls) >= 2:
            return task
    raise AssertionError(f"no mutating task in builtin/{domain}")


# ---------------------------------------------------------------------------- fork
@pytest.mark.parametrize("domain", envace_gym.registration.BUILTIN_DOMAINS)
def test_fork_is_independent_both_ways(domain):
    task = _first_mutating_task(domain)
    env = gym.make("EnvACE-ToolCall-v0", suite=f"builtin/{domain}", split="test")
    env.reset(options={"task_id": task.id})
    plan = _oracle_actions(env)
    env.step(plan[0])  # part-way: the first step's calls ran
    base = env.unwrapped
    fork = base.fork()
    assert fork.backend is not base.backend and fork.suite is base.suite
    assert fork.backend.state_hash() == base.backend.state_hash() and fork.messages == base.messages

    hash_before, messages_before = base.backend.state_hash(), copy.deepcopy(base.messages)
    for action in plan[1:]:  # the fork finishes the episode: the original is untouched
        _, reward, terminated, truncated, _ = fork.step(action)
        if terminated or truncated:
            break
    assert reward == 1.0
    assert base.backend.state_hash() == hash_before and base.messages == messages_before and not base.done

    fork_hash = fork.backend.state_hash()
    base.step(plan[1])  # and the other way round
    assert fork.backend.state_hash() == fork_hash
    assert base.backend.state_hash() != hash_before or base.messages != messages_before


def test_fork_on_bfcl_multi_turn_is_independent():
    env = gym.make("EnvACE-BFCL-v0", category="multi_turn_base")
    task = next(t for t in env.unwrapped.pool if len(t.reference_calls) >= 2)
    env.reset(options={"task_id": task.id})
    plan = _oracle_actions(env)
    env.step(plan[0])
    base = env.unwrapped
    fork = base.fork()
    hash_before = base.backend.state_hash()
    for action in plan[1:]:
        _, reward, terminated, truncated, info = fork.step(action)
        if terminated or truncated:
            break
    assert reward == 1.0 and info["bfcl"]["valid"]
    assert base.backend.state_hash() == hash_before and not base.done
    for action in plan[1:]:  # the original still plays to the same end on its own state
        _, reward, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            break
    assert reward == 1.0


def test_an_mcp_backend_refuses_to_be_copied_with_a_reason():
    backend = MCPBackend("python -m envace_gym.envs.builtin.mcp_server bank")  # never started: copy refuses first
    with pytest.raises(BackendCopyError, match="MCP"):
        backend.copy()


# ---------------------------------------------------------------------------- wrappers configure, never patch
def test_the_rehearsal_wrapper_leaves_the_base_env_as_it_was():
    inner = gym.make("EnvACE-ToolCall-v0", suite="builtin/bank", split="test")
    base = inner.unwrapped
    before = dict(vars(base))
    wrapped = SelfRehearsalEnv(inner, RealResultImaginer(inner))
    assert vars(base) == before  # wrapping changes nothing

    wrapped.reset(options={"task_id": "bank-test-0008"})
    assert type(base.backend).__name__ == "ImaginedBackend"
    _, reward, *_ = wrapped.step(format_calls([ToolCall("get_balance", {"account_id": "A-5247"})]))
    assert base.backend_spec == before["backend_spec"] and base._backends is before["_backends"]

    # The same env used directly answers with its own real backend again: nothing to restore.
    inner.reset(options={"task_id": "bank-test-0008"})
    assert type(base.backend).__name__ == "PythonBackend"


def test_get_wrapper_attr_reaches_the_rehearsal_wrapper_through_gym_make_wrappers():
    inner = gym.make("EnvACE-ToolCall-v0", suite="builtin/bank")
    env = gym.wrappers.RecordEpisodeStatistics(SelfRehearsalEnv(inner, RealResultImaginer(inner)))
    assert env.has_wrapper_attr("imaginer") and isinstance(env.get_wrapper_attr("imaginer"), RealResultImaginer)


# ---------------------------------------------------------------------------- reward registry
class _LengthBasis:
    """A test env's own basis: 1.0 when the final answer is short."""

    def __call__(self, ctx) -> float:
        answer = ctx.record.turn_answers[-1] or ""
        assert ctx.env is not None and ctx.env.task is ctx.task
        return 1.0 if len(answer) <= 10 else 0.0


def test_a_registered_reward_basis_scores():
    register_reward_basis("test_short_answer", _LengthBasis(), overwrite=True)
    assert "test_short_answer" in reward_bases()
    bank = envace_gym.load_suite("builtin/bank").get("bank-test-0008")
    task = Task.from_dict({**bank.to_dict(), "id": "short-1", "reward": ["call_match", "test_short_answer"]})
    call = format_calls([ToolCall("get_balance", {"account_id": "A-5247"})])
    for answer, expected in (("2215.70 EUR", 0.0), ("2215.7 EUR", 1.0)):
        env = envace_gym.ToolCallEnv(tasks=[task], split=None)
        env.reset(options={"task_id": "short-1"})
        env.step(call)
        _, reward, terminated, _, info = env.step(answer)
        assert terminated and reward == expected and info["reward_components"]["test_short_answer"] == expected


def test_an_unregistered_basis_is_refused_when_the_task_is_built():
    with pytest.raises(envace_gym.tasks.TaskFormatError, match="no_such_basis"):
        Task(id="x", user_turns=("hi",), reward=("no_such_basis",))


# ---------------------------------------------------------------------------- one of each thing
@pytest.mark.parametrize(
    "value, kind, target",
    [
        ("real", "real", ""),
        ("replay:a.jsonl", "replay", "a.jsonl"),
        ("mcp:python -m x", "mcp", "python -m x"),
        ("self-inline", "self-inline", ""),
        ("simulator", "simulator", ""),
    ],
)
def test_backend_specs_parse(value, kind, target):
    spec = parse_backend_spec(value)
    assert (spec.kind, spec.target, str(spec)) == (kind, target, value)


@pytest.mark.parametrize("value", ["bogus", "replay:", "mcp:  ", "cache"])
def test_bad_backend_specs_say_what_to_use(value):
    with pytest.raises(ValueError, match="real, replay:PATH"):
        parse_backend_spec(value)
    with pytest.raises(ValueError):
        gym.make("EnvACE-ToolCall-v0", backend=value)


def test_an_imagined_spec_points_to_the_wrapper():
    with pytest.raises(ValueError, match="SelfRehearsalEnv"):
        gym.make("EnvACE-ToolCall-v0", backend="self")


@pytest.mark.parametrize(
    "value, mode, self_imagined, env_backend",
    [
        ("real", None, False, "real"),
        ("replay:a.jsonl", None, False, "replay:a.jsonl"),
        ("self", "prompted", True, "real"),
        ("self-inline", "inline", True, "real"),
        ("simulator", "prompted", False, "real"),
    ],
)
def test_a_backend_spec_carries_its_imagination_mode(value, mode, self_imagined, env_backend):
    spec = parse_backend_spec(value)
    assert (spec.imagination_mode, spec.self_imagined, spec.env_backend) == (mode, self_imagined, env_backend)
    assert spec.imagined == (mode is not None) and parse_backend_spec(spec) is spec
    if self_imagined:
        assert BackendSpec.self_imagined_as(mode) == spec
    with pytest.raises(ValueError, match="prompted"):
        BackendSpec.self_imagined_as("parallel")


def test_one_vocabulary_of_backend_kinds():
    from envace_gym.agents.train.config import BACKENDS
    from envace_gym.imagination import MODES  # SelfRehearsalEnv's modes

    assert {parse_backend_spec(k).imagination_mode for k in IMAGINED_KINDS} == set(MODES)
    assert set(BACKENDS) == set(SELF_KINDS) | {"real", "simulator"}
    assert all(parse_backend_spec(k).kind == k for k in BACKENDS)


class _Echo:
    def imagine(self, request):
        return "{}"


@pytest.mark.parametrize("backend", ["self", "self-inline", "simulator"])
def test_make_env_composes_an_imagined_backend_over_the_real_one(backend):
    spec = parse_backend_spec(backend)
    env = envace_gym.make_env(
        "EnvACE-ToolCall-v0", backend=backend, imaginer=_Echo(), imagination={"on_invalid": "error_observation"}
    )
    assert isinstance(env, SelfRehearsalEnv) and env.mode == spec.imagination_mode
    assert env.on_invalid == "error_observation" and env.unwrapped.backend_spec == "real"
    built = gym.make("EnvACE-ToolCall-v0")  # an env already built: make_env only composes it
    wrapped = envace_gym.make_env(built, backend=spec, imaginer=_Echo(), imagination={"grounding": "none"})
    assert isinstance(wrapped, SelfRehearsalEnv) and wrapped.mode == spec.imagination_mode
    assert wrapped.env is built and wrapped.imagined.grounding == "none"


def test_make_env_leaves_a_real_backend_unwrapped_and_refuses_a_missing_or_stray_imaginer():
    env = envace_gym.make_env("EnvACE-ToolCall-v0", backend="real", suite="builtin/bank", max_turns=2)
    assert not isinstance(env, SelfRehearsalEnv) and env.unwrapped.backend_spec == "real"
    assert env.unwrapped.max_turns == 2 and {t.domain for t in env.unwrapped.pool} == {"bank"}
    factory = lambda task: make_backend(task.backend)  # noqa: E731  (a per-task backend, passed as is)
    assert envace_gym.make_env(backend=factory).unwrapped.backend_spec is factory
    plain = gym.make("EnvACE-ToolCall-v0")
    assert envace_gym.make_env(plain, backend="real") is envace_gym.make_env(plain) is plain
    with pytest.raises(ValueError, match="pass imaginer="):
        envace_gym.make_env(backend="self-inline")
    with pytest.raises(ValueError, match="apply only to backend="):
        envace_gym.make_env(backend="real", imaginer=_Echo())
    with pytest.raises(ValueError, match="apply only to backend="):
        envace_gym.make_env(plain, backend="real", imagination={"grounding": "none"})
    with pytest.raises(ValueError, match="an env already built takes none"):
        envace_gym.make_env(plain, suite="builtin/bank")


@pytest.mark.parametrize(
    ("backend", "plays"),
    [("self", "policy"), ("self-inline", "policy"), ("simulator", "simulator"), ("real", None), ("replay:x", None)],
)
def test_one_function_decides_who_plays_the_env_role(backend, plays):
    policy, simulator = _Echo(), _Echo()
    chosen = env_role_for(backend, policy=policy, simulator=simulator)
    assert chosen is {"policy": policy, "simulator": simulator, None: None}[plays]
    if plays is not None:
        with pytest.raises(ValueError, match=f"needs {plays}="):
            env_role_for(backend, **{"policy" if plays == "simulator" else "simulator": _Echo()})
        env = envace_gym.make_env(backend=backend, policy=policy, simulator=simulator)  # make_env asks it too
        assert env.get_wrapper_attr("imaginer") is chosen
    built = envace_gym.make_env(gym.make("EnvACE-ToolCall-v0"), backend="real", policy=policy)
    assert not isinstance(built, SelfRehearsalEnv)


def test_the_evaluation_order_is_seeded_balanced_and_covers_every_task_first():
    pool = envace_gym.load_suite("builtin").filter(split="test")
    order = pool.episode_order(seed=3)
    assert sorted(t.id for t in order) == sorted(t.id for t in pool)  # each task once
    assert [t.id for t in pool.episode_order(seed=3)] == [t.id for t in order]
    assert [t.id for t in pool.episode_order(seed=4)] != [t.id for t in order]
    prefix = [t.domain for t in order[:8]]
    assert all(prefix.count(d) == 2 for d in envace_gym.registration.BUILTIN_DOMAINS)  # any prefix is balanced
    assert len(pool.episode_order(len(pool) + 5, seed=3)) == len(pool) + 5


def test_the_env_counts_valid_and_invalid_calls():
    env = gym.make("EnvACE-ToolCall-v0", suite="builtin/bank", split="test")
    env.reset(options={"task_id": "bank-test-0008"})
    _, _, _, _, info = env.step(format_calls([ToolCall("get_balance", {"account_id": "A-5247"})]))
    # each call that passed the checks ran on the real backend: a live call (the ledger's kinds, per episode)
    assert info["call_counts"] == {"ok": 1, "failed": 0, "imagined": 0, "live": 1, "logged": 0, "verifier": 0,
                                   "diagnostic": 0}  # fmt: skip
    # an unknown tool, a schema violation and broken JSON are invalid; "no such account" is the world's answer
    bad = format_calls([ToolCall("nope", {}), ToolCall("get_balance", {"account_id": 5})])
    _, _, _, _, info = env.step(bad + '<tool_call>{"name": ')
    _, _, _, _, info = env.step(format_calls([ToolCall("get_balance", {"account_id": "A-0000"})]))
    assert info["errors"][0]["code"] == "TOOL_EXECUTION_ERROR"
    assert {k: info["call_counts"][k] for k in ("ok", "failed", "live")} == {"ok": 2, "failed": 3, "live": 2}


# ---------------------------------------------------------------------------- a small public surface
#: The top level: what a user of the envs writes (the envs and the one composition function, tasks and
#: suites, tools, calls and the registries). Everything else is imported from its own module.
TOP_LEVEL = {
    *("ToolCallEnv", "ToolCallVectorEnv", "SelfRehearsalEnv", "make_env"),
    *("Task", "TaskSuite", "RefCall", "RefTurn", "load_suite", "register_suite"),
    *("Toolkit", "tool", "register_backend", "register_reward_basis", "ToolCall", "format_calls"),
}


def _bound_at_top(path: Path) -> set[str]:
    """The names ``path``'s module statements bind (imports, definitions, assignments)."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.module != "__future__":
            names |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.Import):
            names |= {a.asname or a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


def test_the_top_level_is_the_agreed_list_and_re_exports_nothing_else():
    import types

    assert len(envace_gym.__all__) == len(TOP_LEVEL) and set(envace_gym.__all__) == TOP_LEVEL
    public = {n for n in _bound_at_top(CORE / "__init__.py") if not n.startswith("_")}
    assert public == TOP_LEVEL  # each name of __all__ is defined or imported there, and no other public one
    assert all(getattr(envace_gym, n) is not None for n in TOP_LEVEL)
    # At run time too: besides __all__, only submodules (envace_gym.backends, ...) are public attributes.
    others = {n for n, v in vars(envace_gym).items() if not n.startswith("_") and not isinstance(v, types.ModuleType)}
    assert others == TOP_LEVEL
    for gone in ("rehearse", "env_role_for", "parse_backend_spec", "BUILTIN_DOMAINS", "ImagineRequest"):
        assert not hasattr(envace_gym, gone)


# ---------------------------------------------------------------------------- layering
CORE = ROOT / "envace_gym"


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                names.add(".".join(base + ([node.module] if node.module else [])))
            else:
                names.add(node.module or "")
    return names


def test_the_core_imports_neither_agents_nor_envs():
    offenders = {}
    for path in CORE.rglob("*.py"):
        if "cli" in path.relative_to(CORE).parts:
            continue  # the CLI is the one floor above core, envs and agents
        bad = {n for n in _imports(path) if n.startswith(("envace_gym.agents", "envace_gym.envs"))}
        if bad:
            offenders[str(path.relative_to(ROOT))] = sorted(bad)
    assert offenders == {}


def test_envs_import_no_agents():
    offenders = {
        str(p.relative_to(ROOT)): sorted(n for n in _imports(p) if n.startswith("envace_gym.agents"))
        for p in (ROOT / "envs").rglob("*.py")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


#: The rollout / half-step / imaginer path, whose public signatures name their types (no bare ``Any``).
TYPED_PATH = [
    "agents/rollout/loop.py",
    "agents/rollout/remote.py",
    "agents/rollout/hooks.py",
    "envace_gym/env.py",
    "envace_gym/imagination/halfstep.py",
    "envace_gym/imagination/backend.py",
    "envace_gym/imagination/protocol.py",
]


def _functions_in(tree: ast.AST) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]


def _functions(path: Path) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return _functions_in(ast.parse(path.read_text()))


def test_the_rollout_reads_top_to_bottom_short_functions_and_no_closures():
    too_long, closures = {}, {}
    for path in (ROOT / "agents" / "rollout").glob("*.py"):
        for fn in _functions(path):
            where = f"{path.name}:{fn.name}"
            if fn.end_lineno - fn.lineno + 1 > 60:
                too_long[where] = fn.end_lineno - fn.lineno + 1
            inner = [
                n.name for n in ast.walk(fn) if n is not fn and isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
            ]
            if inner:
                closures[where] = inner
    assert too_long == {} and closures == {}


def test_no_class_in_agents_composes_by_getattr_proxy():
    proxies = [
        f"{path.relative_to(ROOT)}:{cls.name}"
        for path in (ROOT / "agents").rglob("*.py")
        for cls in ast.walk(ast.parse(path.read_text()))
        if isinstance(cls, ast.ClassDef)
        and any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__" for n in cls.body)
    ]
    assert proxies == []


def test_the_rollout_path_has_no_bare_any_in_public_signatures():
    def bare(annotation) -> bool:
        return (isinstance(annotation, ast.Name) and annotation.id == "Any") or (
            isinstance(annotation, ast.Constant) and annotation.value == "Any"
        )

    found = []
    for name in TYPED_PATH:
        for fn in _functions(ROOT / name):
            if fn.name.startswith("_"):
                continue
            params = fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
            found += [f"{name}:{fn.name}({a.arg})" for a in params if bare(a.annotation)]
            found += [f"{name}:{fn.name} -> Any"] if bare(fn.returns) else []
    assert found == []


@pytest.mark.parametrize("backend", ["self-inline", "simulator"])  # real and self: tests/test_envace_trainer.py
def test_the_trainer_composes_its_envs_as_the_backend_spec_says(backend):
    from envace_gym.agents.lm.policy import tiny_policy
    from envace_gym.agents.train.config import EnvACEConfig
    from envace_gym.agents.train.envace import EnvACETrainer

    policy = tiny_policy()
    cfg = EnvACEConfig(backend=backend, steps=1, tasks_per_step=1, group_size=2, bf16=False)
    trainer = EnvACETrainer(policy, lambda: gym.make("EnvACE-ToolCall-v0", suite="builtin/bank"), cfg, progress=False)
    mode = parse_backend_spec(backend).imagination_mode
    for env in trainer.envs:
        assert isinstance(env, SelfRehearsalEnv) == (mode is not None)
        if mode is not None:
            assert env.mode == mode
            assert env.imaginer is (trainer.simulator if backend == "simulator" else policy)


def test_no_deprecated_alias_remains():
    """0.1.0 was never released: no alias kept "for one release" (no module, name or info key that only
    forwards to a new one), no DeprecationWarning raised by the package. ``envace_gym.rehearsal`` is
    test-time rehearsal's own package, no longer an alias of the env role's (``envace_gym.imagination``)."""
    import importlib

    import envace_gym.imagination as imagination
    import envace_gym.rehearsal as rehearsal

    assert sorted(rehearsal.__all__) == ["DetachedBackend", "ImaginedUser", "RehearsalFork"]
    forwarded = {n for n, v in vars(imagination).items() if not n.startswith("_") and vars(rehearsal).get(n) is v}
    assert forwarded == set()  # nothing of the env role's package is re-exported
    for module in ("backend", "halfstep", "prompt", "protocol", "wrapper"):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(f"envace_gym.rehearsal.{module}")
    offenders = [
        f"{path.relative_to(ROOT)}:{n}"
        for folder in (CORE, ROOT / "agents", ROOT / "envs")
        for path in sorted(folder.rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"DeprecationWarning|DEPRECATED_|for one release|deprecated alias", line)
    ]
    assert not offenders, offenders
    env = SelfRehearsalEnv(gym.make("EnvACE-ToolCall-v0", suite="builtin/bank", split="test"), _Echo())
    env.reset(seed=0)
    call = '<tool_call>\n{"name": "get_balance", "arguments": {"account_id": "A-1"}}\n</tool_call>'
    _, _, _, _, info = env.step(call)
    assert info["env_role_samples"] and "rehearsal" not in info


# ---------------------------------------------------------------------------- public Gymnasium API only
#: Files that may touch Gymnasium's vector envs: none may use their internals, which a minor release may change.
PUBLIC_GYM_ONLY = [CORE, ROOT / "agents", ROOT / "envs"]
#: Named in issue 40 (the internals once used here); the rest is read out of the installed Gymnasium below.
KNOWN_INTERNALS = {
    *("parent_pipes", "error_queue", "AsyncState", "_state", "_raise_if_errors", "_add_info", "_autoreset_envs"),
    *("_env_obs", "_observations", "_rewards", "_terminations", "_truncations"),
}


def _gymnasium_vector_internals() -> tuple[set[str], set[str]]:
    """The private names of Gymnasium's vector envs (their ``def _x`` and ``self._x``, less those that
    ``gymnasium.core``'s ``Env``/``Wrapper`` also use, such as ``_np_random``), and the commands of its
    worker-pipe protocol that are no public method (``"_call"``, ``"_setattr"``, ``"reset-noop"``...)."""

    def private(name: str) -> bool:
        return name.startswith("_") and not name.startswith("__")

    core = {n.attr for n in ast.walk(ast.parse(Path(gym.core.__file__).read_text())) if isinstance(n, ast.Attribute)}
    names, commands = set(), set()
    for path in Path(gym.vector.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and private(node.name):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
                names |= {node.attr} if private(node.attr) else set()
            elif isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and node.left.id == "command":
                commands |= {c.value for c in node.comparators if isinstance(c, ast.Constant)}
    assert "_call" in commands, "Gymnasium's worker loop changed: read its commands another way"
    return names - core, {c for c in commands if c.startswith("_") or not c.isidentifier()}


def _gymnasium_internals_used(path: Path, names: set[str], commands: set[str]) -> list[str]:
    public = set(gym.vector.__all__)
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Attribute) and node.attr in names:
            found.append(f"{where} .{node.attr}")
        elif isinstance(node, ast.Constant) and node.value in commands:
            found.append(f"{where} the worker command {node.value!r}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("gymnasium"):
            inside_vector = node.module.startswith("gymnasium.vector.") and node.module != "gymnasium.vector.utils"
            found += [
                f"{where} from {node.module} import {a.name}"
                for a in node.names
                if a.name.startswith("_") or a.name in names or (inside_vector and a.name not in public)
            ]
    return found


def test_only_gymnasiums_public_vector_api_is_used():
    """No private attribute, method, worker-pipe command or private import of Gymnasium's vector envs
    (``SyncVectorEnv``'s step state, ``AsyncVectorEnv``'s pipes and state): the public API (``call``,
    ``set_attr``, ``*_wait(timeout=)``, ``reset_mask``, ``close(terminate=True)``) or our own code instead."""
    names, commands = _gymnasium_vector_internals()
    names |= KNOWN_INTERNALS
    found = [hit for folder in PUBLIC_GYM_ONLY for path in folder.rglob("*.py")
             for hit in _gymnasium_internals_used(path, names, commands)]  # fmt: skip
    assert found == []


def test_a_step_is_one_generator_with_no_flag_threaded_through():
    """House rules of the step: no ``defer`` parameter, no ``begin_call``/``finish_call`` pair found on a backend,
    no ``ask`` callback into the policy in the half-step module, and every request names who answers it."""
    import inspect

    from envace_gym.env import ToolCallEnv
    from envace_gym.imagination import ImagineRequest, JudgeRequest, Request, UserRequest

    offenders = [
        f"{path.relative_to(ROOT)}:{n}"
        for folder in (CORE, ROOT / "agents", ROOT / "envs", ROOT / "benchmarks")
        for path in sorted(folder.rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\bdefer\b|begin_call|finish_call|\bask=", line)
    ]
    assert not offenders, offenders
    assert inspect.isgeneratorfunction(ToolCallEnv.play_step)
    # One request type: every kind is a `Request` and names who answers it; the step yields nothing else.
    assert all(issubclass(r, Request) for r in (ImagineRequest, UserRequest, JudgeRequest))
    assert [r.role for r in (ImagineRequest, UserRequest, JudgeRequest)] == ["env_role", "user", "judge"]
    from envace_gym.env import ResetPlay, StepPlay

    assert [p.__args__[0] for p in (StepPlay, ResetPlay)] == ["Request"] * 2


def test_the_actors_context_stays_on_the_agent_side():
    """An env-role request is what the env knows (the conversation, the call, the mode, the schemas); the
    actor's exact tokens and KV-cache key are the agent side's, kept by env index and passed beside it."""
    import dataclasses

    from envace_gym.imagination import ImagineRequest

    assert {f.name for f in dataclasses.fields(ImagineRequest)} == {"messages", "tool", "arguments", "mode", "tools"}
    offenders = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in sorted(CORE.rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"context_ids|context_text|ActorContext", line)
    ]
    assert not offenders, offenders
