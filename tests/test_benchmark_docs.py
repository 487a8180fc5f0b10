"""Benchmark tables in the docs are written by the scripts (``benchmarks/_docs.py``): the helper replaces
what lies between a block's markers, and each generated block is what its script renders from the JSON
kept under ``docs/``."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _block(page: str, name: str) -> str:
    text = (ROOT / "docs" / page).read_text()
    match = re.search(rf"^<!-- {name}:begin -->\n(.*?)\n<!-- {name}:end -->$", text, re.DOTALL | re.MULTILINE)
    assert match, f"docs/{page} has no {name} block"
    return match.group(1)


def test_write_block_replaces_between_the_markers_only(tmp_path):
    write_block = _load("_docs").write_block
    page = tmp_path / "page.md"
    page.write_text("intro\n<!-- t:begin -->\nold\ntable\n<!-- t:end -->\nafter\n")
    assert write_block(page, "t", "| a |\n|---|\n| 1 |\n") is True
    assert page.read_text() == "intro\n<!-- t:begin -->\n| a |\n|---|\n| 1 |\n<!-- t:end -->\nafter\n"
    assert write_block(page, "t", "| a |\n|---|\n| 1 |") is False  # the same table: the page is not touched


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("no markers at all\n", r"found 0 and 0"),
        ("<!-- t:begin -->\nx\n", r"found 1 and 0"),
        ("<!-- t:end -->\nx\n<!-- t:begin -->\n", r"one '<!-- t:begin -->' line and then one '<!-- t:end -->'"),
        ("<!-- t:begin -->\n<!-- t:begin -->\n<!-- t:end -->\n", r"found 2 and 1"),
        ("text <!-- t:begin -->\nx\n<!-- t:end -->\n", r"must each be a line of their own"),
    ],
)
def test_write_block_without_its_markers_is_a_clear_error_and_writes_nothing(tmp_path, text, says):
    write_block = _load("_docs").write_block
    page = tmp_path / "page.md"
    page.write_text(text)
    with pytest.raises(ValueError, match=f"page.md: .*{says}"):
        write_block(page, "t", "| new |")
    assert page.read_text() == text


@pytest.mark.parametrize(
    ("block", "files"),
    [
        ("throughput-before-after", "throughput_{}_2026-12-05.json"),
        ("throughput-loop", "throughput_loop_{}_2026-12-06.json"),
        ("throughput-step", "throughput_step_{}_2026-12-07.json"),
    ],
)
def test_the_throughput_tables_are_the_scripts_rendering_of_the_kept_json(block, files):
    rollout = _load("rollout_throughput")
    before, after = (
        json.loads((ROOT / "docs" / "results" / files.format(w)).read_text()) for w in ("before", "after")
    )
    assert rollout.before_after_table(before, after) == _block("benchmarks.md", block)


def test_the_repeated_throughput_table_is_the_scripts_rendering_of_the_kept_json():
    rollout = _load("rollout_throughput")
    repeats = json.loads((ROOT / "docs" / "results" / "throughput_engine_2026-12-05.json").read_text())
    table = rollout.repeats_table(repeats)
    assert table == _block("benchmarks.md", "throughput-repeats")
    assert [line.split(" | ")[0] for line in table.splitlines()[2:]] == ["| 1", "| 4", "| 16"]


def test_the_warm_start_table_is_the_scripts_rendering_of_the_kept_json():
    warm_start = _load("warm_start")
    rows = json.loads((ROOT / "docs" / "results" / "warm_start_2026-12-06.json").read_text())["rows"]
    assert warm_start.table(rows) == _block("learning.md", "warm-start")
    assert [r["scale"] for r in rows] == sorted((r["scale"] for r in rows), reverse=True)


def test_the_learning_val_block_is_the_scripts_rendering_of_the_kept_json(monkeypatch):
    learning = _load("learning")
    written = {}
    docs_helper = sys.modules.get("_docs") or _load("_docs")  # what write_docs imports, loaded once
    monkeypatch.setattr(docs_helper, "write_block", lambda page, name, text: written.update({name: text}))
    learning.write_docs(str(ROOT / "docs" / "results" / "learning_val_2026-12-06.json"))
    assert set(written) == {"learning-val"} and written["learning-val"] == _block("learning.md", "learning-val")
    arms = json.loads((ROOT / "docs" / "results" / "learning_val_2026-12-06.json").read_text())["arms"]
    chosen = arms["grpo-real, lr 1e-4 (chosen)"]
    # the paired figure is recomputable from the outcomes kept
    start, after = arms["untrained"]["val"]["outcomes"]["0"], chosen["val"]["outcomes"]["0"]
    diffs = [after[t] - start[t] for t in after]
    assert sum(diffs) / len(diffs) == chosen["paired_vs_start"]["mean"] and len(diffs) == 96


def test_the_learning_blocks_are_the_scripts_rendering_of_the_kept_json(monkeypatch):
    learning = _load("learning")
    written = {}
    docs_helper = sys.modules.get("_docs") or _load("_docs")  # what write_docs imports, loaded once
    monkeypatch.setattr(docs_helper, "write_block", lambda page, name, text: written.update({name: text}))
    learning.write_docs(str(ROOT / "docs" / "results" / "learning_2026-12-06.json"), "learning-2026-12-06")
    parts = ("key", "main", "environment", "cost", "kinds")
    assert set(written) == {f"learning-2026-12-06-{part}" for part in parts}
    for name, text in written.items():
        assert text == _block("learning.md", name), name
    # the kept per-run files are what the aggregate was made from: same outcomes, task by task
    arms = json.loads((ROOT / "docs" / "results" / "learning_2026-12-06.json").read_text())["arms"]
    run = json.loads(
        (ROOT / "docs" / "results" / "learning_runs_2026-12-06" / "envace-ref-seed0" / "result.json").read_text()
    )
    assert run["evals"]["test-id"]["outcomes"] == arms["envace-ref"]["test-id"]["outcomes"]["0"]
    assert arms["envace-ref"]["live_calls"] == 0 < arms["envace-ref"]["logged_results"]


def test_the_current_learning_table_and_the_readme_headline_are_the_scripts_rendering(monkeypatch):
    """The page's current table, its key results and environment, and the README's headline are what the script
    writes from the kept JSON; that JSON was made from the kept per-run files, every run and its start in one
    recorded environment, no seed refused."""
    learning = _load("learning")
    written = {}
    docs_helper = sys.modules.get("_docs") or _load("_docs")
    monkeypatch.setattr(docs_helper, "write_block", lambda page, name, text: written.update({name: text}))
    kept = ROOT / "docs" / "results" / "learning_2026-12-08.json"
    learning.write_docs(str(kept))
    parts = ("key", "main", "environment", "cost", "kinds", "transcripts")
    assert set(written) == {f"learning-{part}" for part in parts} | {"learning-headline"}
    for name, text in written.items():
        assert text == _block("../README.md" if name == "learning-headline" else "learning.md", name), name
    arms = json.loads(kept.read_text())["arms"]
    environment = arms["untrained"]["environment"]
    for name, arm in arms.items():
        assert arm["environment"] == environment and arm["seeds"] == [0, 1, 2], name
        assert not (arm.get("pairing") or {}).get("refused"), name
        for seed in ("0", "1", "2"):
            run = json.loads((ROOT / "docs" / "results" / "learning_runs_2026-12-08" / f"{name}-seed{seed}"
                              / "result.json").read_text())  # fmt: skip
            assert run["evals"]["test-id"]["outcomes"] == arm["test-id"]["outcomes"][seed], (name, seed)
            assert run["environment"] == environment
    blind = arms["envace-blind"]
    assert (blind["live_calls"], blind["logged_results"], blind["invalid_penalty"]) == (0, 0, 0)
    assert blind["reward"] == "bound"
    # the transcripts' outcomes are recomputable from the kept training episodes
    runs = ROOT / "docs" / "results" / "learning_runs_2026-12-08"
    counts = [learning.transcript_outcomes(runs / f"envace-blind-seed{k}") for k in range(3)]
    assert learning._pooled(counts) == blind["transcripts"]


def test_two_arms_pair_only_where_they_ran_in_one_environment():
    learning = _load("learning")
    from envace_gym.agents.provenance import run_environment

    here = run_environment(precision="float32")
    a = {"environment": here, "test-id": {"outcomes": {"0": {"t1": 1, "t2": 1}, "1": {"t3": 0}}}}
    b = {"environment": here, "test-id": {"outcomes": {"0": {"t1": 0, "t2": 1}, "1": {"t3": 1, "t4": 1}}}}
    d = learning.paired_arms(a, b, "test-id")
    assert (d["mean"], d["won"], d["lost"], d["tasks"]) == (0.0, 1, 1, 3)  # t1 +1, t2 0, t3 -1; t4 unpaired
    assert learning.paired_arms(a, {**b, "environment": {**here, "cpu_capability": "X"}}, "test-id") is None
    assert learning.paired_arms(a, {**b, "environment": None}, "test-id") is None


def test_the_env_step_block_is_in_the_scripts_format():
    """No JSON of the env-step figures shown was kept: the block is what the script writes from a --json
    output with those figures, so its next run replaces it in place."""
    env_step = _load("env_step")
    rows = [("random", 3323, 13802), ("oracle", 3024, 11162)]
    result = {
        "results": [
            {"policy": p, "old": {"steps_per_s": old}, "new": {"steps_per_s": new}, "ratio": round(new / old, 1)}
            for p, old, new in rows
        ]
    }
    assert env_step.docs_table(result) == _block("benchmarks.md", "env-step")


def test_the_env_step_cartpole_block_is_the_kept_median_run():
    """The per-CartPole figures shown are the script's table of a kept --json run (the median of three), and
    the prose's figures are the kept runs': the current code's and the code before, run by run."""
    env_step = _load("env_step")
    runs = [
        json.loads((ROOT / "docs" / "results" / f"env_step_cartpole_4012b38_after{i}.json").read_text())
        for i in (1, 2, 3)
    ]
    before = [
        json.loads((ROOT / "docs" / "results" / f"env_step_cartpole_65fddfe_before{i}.json").read_text())
        for i in (1, 2, 3)
    ]
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    for kept in (runs, before):
        for policy in (0, 1):
            first, second, third = (f"{run['results'][policy]['per_cartpole']:.3f}" for run in kept)
            shown = f"{first}, {second} and {third}"
            assert shown in " ".join(text.split()), shown
    shown = [r for r in runs if env_step.cartpole_table(r) == _block("benchmarks.md", "env-step-cartpole")]
    assert len(shown) == 1
    ratios = sorted(run["results"][0]["per_cartpole"] for run in runs)
    assert shown[0]["results"][0]["policy"] == "random" and shown[0]["results"][0]["per_cartpole"] == ratios[1]


def test_the_rehearsal_table_pools_seeds_and_pairs_each_task_with_budget_0():
    bench = _load("rehearsal_budget")

    def row(use, budget, seed, outcomes):
        n = len(outcomes)
        return {"use": use, "budget": budget, "rehearsal_seed": seed, "episodes": n, "success": sum(outcomes) / n,
                "real_calls": 1.0, "rehearsals": 2.0 * (budget != 0), "rehearsal_tokens": 0.0,
                "seconds_per_episode": 1.0, "task_ids": ["a", "b", "c", "d"], "outcomes": outcomes}  # fmt: skip

    rows = [row("none", 0, None, [1, 0, 0, 1]), row("select-draft", 2, 0, [1, 1, 0, 0]),
            row("select-draft", 2, 1, [1, 1, 1, 1])]  # fmt: skip
    base, select = bench.pooled(rows)
    assert base["delta"] is None and base["seeds"] == 1 and base["episodes"] == 4
    assert select["seeds"] == 2 and select["episodes"] == 8 and select["success"] == 6 / 8
    # per task, averaged over seeds: a 0, b +1, c +0.5, d -0.5 -> mean +0.25; won 3 (b twice, c), lost 1 (d)
    assert select["delta"]["mean"] == 0.25 and (select["delta"]["won"], select["delta"]["lost"]) == (3, 1)
    lo, hi = select["delta"]["ci"]
    assert lo < 0.25 < hi and lo >= -0.5 and hi <= 1.0
    assert "+25.0 (" in bench.table({"p": rows}) and "; 3/1) |" in bench.table({"p": rows})
    old = [{k: v for k, v in r.items() if k not in ("task_ids", "outcomes")} for r in rows]
    assert bench.pooled(old)[1]["delta"] is None  # results kept before outcomes were: no paired column
    # A later policy's budget 0 is paired with the first policy's, task by task: a -1, b c d 0 -> -0.25, 0/1.
    two = bench.table({"p": rows, "q": [row("none", 0, None, [0, 0, 0, 1]), row("select-draft", 2, 0, [1, 0, 0, 0])]})
    q_base, q_select = two.splitlines()[4:6]
    assert q_base.startswith("| q | - | 0 |") and "-25.0 (" in q_base and "; 0/1) vs p |" in q_base
    assert "+0.0 (" in q_select and "; 1/1) |" in q_select  # its rehearsal row: against its own budget 0
    assert "vs p" not in two.splitlines()[2]  # the first policy's own budget 0 is the reference


@pytest.mark.parametrize(
    ("results", "block"),
    [
        ("rehearsal_2026-12-05.json", "rehearsal-table"),
        ("rehearsal_draft_2026-12-05.json", "rehearsal-draft-table"),
        ("rehearsal_train_2026-12-05.json", "rehearsal-train-table"),
        ("rehearsal_arm_2026-12-05.json", "rehearsal-arm-table"),
        ("rehearsal_arm_train_2026-12-05.json", "rehearsal-arm-train-table"),
    ],
)
def test_the_rehearsal_tables_are_the_scripts_rendering_of_the_kept_json(monkeypatch, results, block):
    bench = _load("rehearsal_budget")
    written = {}
    monkeypatch.setattr(bench, "write_block", lambda page, name, text: written.update({name: text}))
    text = bench.write_docs(str(ROOT / "docs" / "results" / results), block)
    assert text == written[block] == _block("rehearsal.md", block)


def test_the_error_foresight_table_is_the_scripts_rendering_of_the_kept_json(monkeypatch):
    bench = _load("error_foresight")
    written = {}
    monkeypatch.setattr(bench, "write_block", lambda page, name, text: written.update({name: text}))
    path = ROOT / "docs" / "results" / "error_foresight_2026-12-05.json"
    monkeypatch.setattr(sys, "argv", ["error_foresight.py", "--write-docs", str(path)])
    bench.main()
    assert written["error-foresight-table"].rstrip("\n") == _block("rehearsal.md", "error-foresight-table")


def test_error_foresight_probes_pair_each_reference_call_with_one_that_fails_for_real():
    import envace_gym

    bench = _load("error_foresight")
    tasks = [t for t in envace_gym.load_suite("builtin/bank") if t.split == "train"][:40]
    items = bench.probes(tasks)
    assert items and len(items) % 2 == 0
    for (task, right, right_wrong), (same, wrong, wrong_wrong) in zip(items[::2], items[1::2], strict=True):
        assert same is task and (right_wrong, wrong_wrong) == (False, True) and right.name == wrong.name
        assert wrong.arguments["account_id"] not in json.dumps(task.initial_state)
        assert bench.real_fails(task, wrong) and not bench.real_fails(task, right)


def test_the_learning_report_pairs_an_arm_with_a_start_only_where_they_ran_in_the_same_environment():
    """Hand-made records: seed 0 ran alike; seed 1's start used other kernels; seed 2's start is kept from
    before environments were recorded; seed 3's arm evaluated its start again where it ran. Only seeds 0 and 3
    are paired, the refusals name what differs, and the paired difference reads only the paired seeds."""
    learning = _load("learning")
    from envace_gym.agents.provenance import run_environment

    here = run_environment(precision="float32")
    avx512 = {**here, "cpu_capability": "AVX512"}
    older_torch = {**here, "versions": {**here["versions"], "torch": "2.12.0+cpu"}}

    def evals(outcome: int) -> dict:
        return {"test-id": {"outcomes": {"t": outcome}}}

    start = [
        {"seed": 0, "environment": here, "evals": evals(0)},
        {"seed": 1, "environment": avx512, "evals": evals(0)},
        {"seed": 2, "evals": evals(0)},
        {"seed": 3, "environment": older_torch, "evals": evals(1)},
    ]
    arm = [{"seed": s, "environment": here, "evals": evals(1)} for s in range(4)]
    arm[3]["start"] = {"environment": here, "evals": evals(0)}  # re-evaluated where the arm ran
    assert learning.pairing(arm, start) == {
        "paired": [0, 3],
        "refused": {"1": ["cpu_capability"], "2": ["environment"]},
    }
    assert learning.paired(arm, start, "test-id")["mean"] == 1.0  # seeds 0 and 3: 1 - 0 each; seed 1 not read
    arm[3]["start"] = None  # without its own start evaluation seed 3 meets the kept one: another torch
    assert learning.pairing(arm, start)["refused"]["3"] == ["versions.torch"]


def test_the_learning_summary_pairs_the_env_roles_fidelity_call_by_call():
    """Two hand-made runs of one seed, evaluated in the same environment: the start's and an arm's env-role
    answers to the same three val calls. The arm's summary pairs them by (task, call), and the table shows
    the pooled field share and the paired difference."""
    learning = _load("learning")
    from envace_gym.agents.provenance import run_environment

    here = run_environment(precision="float32")

    def run(fields: list[float]) -> dict:
        calls = [
            {"task_id": task, "call": i, "tool": "get_balance", "parses": True, "schema": True, "fields": f,
             "f1": f, "exact": f == 1.0}
            for (task, i), f in zip((("a", 0), ("a", 1), ("b", 0)), fields, strict=True)
        ]  # fmt: skip
        return {
            "seed": 0,
            "environment": here,
            "evals": {"test-id": {"outcomes": {"t": 0}, "kinds": {"t": "balance"}}},
            "fidelity": {"calls_detail": calls},
            "records": [],
            "calls": {"live_calls": 0, "logged_calls_used": 0, "diagnostic_calls": 0},
            "train_s": 0.0,
            "tokens": 0,
        }

    start, arm = [run([0.0, 0.5, 1.0])], [run([1.0, 0.5, 0.5])]
    results = {
        "untrained": learning.summarize("untrained", start, start, "test-id", 8),
        "envace-blind": learning.summarize("envace-blind", arm, start, "test-id", 8),
    }
    assert results["untrained"]["fidelity"]["field_exact"] == 0.5
    assert results["untrained"]["fidelity_vs_start"] is None
    d = results["envace-blind"]["fidelity_vs_start"]
    assert d["mean"] == pytest.approx((1.0 + 0.0 - 0.5) / 3)  # a/0 +1, a/1 0, b/0 -0.5
    assert (d["calls"], d["tasks"], d["won"], d["lost"]) == (3, 2, 1, 1)
    head, _, start_row, arm_row = learning.table(results).splitlines()
    assert head.endswith("env-role fields on val calls (vs start, points; won/lost calls) |")
    assert start_row.endswith("| 50.0% |") and arm_row.split("|")[-2].strip().startswith("66.7%, +16.7 (")
    assert results["envace-blind"]["environment"] == here  # the one environment its seeds ran in


def _arm(paired: tuple[float, float, float] | None, fidelity=None, seeds=3, live=0, penalty=0.0) -> dict:
    """A summarized arm's fields that the key results and the goal check read."""
    d = None if paired is None else {"mean": paired[0], "ci95": [paired[1], paired[2]], "tasks": 288}
    f = None if fidelity is None else {"mean": fidelity[0], "ci95": [fidelity[1], fidelity[2]]}
    return {"seeds": list(range(seeds)), "paired_vs_start": d, "fidelity_vs_start": f, "live_calls": live,
            "logged_results": 0, "invalid_penalty": penalty, "split": "test-id"}  # fmt: skip


def test_the_goal_check_names_what_each_imagination_arm_misses():
    """The goal: an imagination-only arm (0 live calls, the task reward alone, 3 seeds) above the start with its
    paired interval above 0, at least half of grpo-real's gain, and its env role's fidelity interval above 0."""
    learning = _load("learning")
    real = _arm((0.10, 0.05, 0.15), live=200)
    good = _arm((0.06, 0.01, 0.11), fidelity=(0.04, 0.01, 0.07))
    assert learning.goal_check({"grpo-real": real, "envace-blind": good}) == "Goal: **met** by `envace-blind`."
    short = {
        "grpo-real": real,
        "envace-blind": _arm((0.04, 0.01, 0.08), fidelity=(0.04, 0.01, 0.07)),  # 40% of the gain
        "envace-blind-penalty": _arm((0.08, 0.02, 0.12), fidelity=(0.04, 0.01, 0.07), penalty=0.1),
        "envace-log": _arm((0.08, -0.01, 0.12), fidelity=(0.01, -0.02, 0.04), seeds=2),
    }
    text = learning.goal_check(short)
    assert text.startswith("Goal: **not met**: ")
    assert "`envace-blind`: 40% of `grpo-real`'s gain, under half;" in text
    assert "`envace-blind-penalty`: trained with the penalty on unusable output (0.1);" in text
    assert text.endswith(
        "`envace-log`: its paired interval is not above 0, fewer than 3 seeds, "
        "its env role's fidelity interval is not above 0."
    )
    unmeasured = learning.goal_check({"grpo-real": real, "envace-blind": _arm((0.06, 0.01, 0.11), penalty=None)})
    assert unmeasured == (
        "Goal: **not met**: `envace-blind`: what trained it (the penalty on unusable output) was not recorded, "
        "its env role's fidelity was not measured."
    )
    no_gain = {"grpo-real": _arm((0.02, -0.01, 0.05), live=200), "envace-blind": good}
    assert learning.goal_check(no_gain).startswith("Goal: not met (`grpo-real` is not above the start")
    key = learning.key_results({"grpo-real": real, "envace-blind": good}).splitlines()
    assert "60% of `grpo-real`'s gain; its env role's fidelity on `val` calls +4.0 points" in key[2]
    assert key[-1] == "    * Goal: **met** by `envace-blind`."


def test_the_environment_note_says_where_the_runs_ran_or_that_they_differ():
    learning = _load("learning")
    from envace_gym.agents.provenance import run_environment

    here = run_environment(precision="float32")
    same = {"untrained": {"environment": here}, "grpo-real": {"environment": here}}
    note = learning.environment_note(same)
    assert note.startswith(f"Environment, the same for every run and its start: code `{here['code']}`")
    assert f"CPU kernels {here['cpu_capability']}, float32" in note and f"torch {here['versions']['torch']}" in note
    other = {**here, "cpu_capability": "AVX512" if here["cpu_capability"] != "AVX512" else "AVX2"}
    differ = learning.environment_note({"untrained": {"environment": here}, "grpo-real": {"environment": other}})
    assert "**the arms ran in different environments**" in differ and "AVX512" in differ
    partly = learning.environment_note({"untrained": {"environment": here}, "grpo-real": {"environment": None}})
    assert partly.endswith("Not recorded for: `grpo-real`.")
    assert learning.environment_note({"a": {}}).startswith("Environment: not recorded")


def test_the_learning_summary_says_what_trained_an_arm_and_where():
    """An arm's summary names its penalty, the reward that trained it, the share of imagined episodes whose
    reward the binding changed, and the one environment of its seeds (None where two seeds differ)."""
    learning = _load("learning")
    from envace_gym.agents.provenance import run_environment

    def run(seed: int, environment: dict) -> dict:
        return {
            "seed": seed,
            "invalid_penalty": 0.0,
            "reward": "bound",
            "environment": environment,
            "evals": {"test-id": {"outcomes": {f"t{seed}": 1}, "kinds": {f"t{seed}": "balance"}}},
            "records": [{"bound_episodes": 32, "binding_changed": 4 * (seed + 1)}],
            "calls": {"live_calls": 0, "logged_calls_used": 0, "diagnostic_calls": 0},
            "train_s": 0.0,
            "tokens": 0,
        }

    here = run_environment(precision="float32")
    arm = learning.summarize("envace-blind", [run(0, here), run(1, here)], [], "test-id", 8)
    assert (arm["invalid_penalty"], arm["reward"]) == (0.0, "bound")
    assert arm["binding_changed"] == (4 + 8) / 64
    assert arm["environment"] == here
    elsewhere = {**here, "cpu_capability": "DEFAULT" if here["cpu_capability"] != "DEFAULT" else "AVX2"}
    mixed = learning.summarize("envace-blind", [run(0, here), run(1, elsewhere)], [], "test-id", 8)
    assert mixed["environment"] is None


def test_the_kernels_block_is_the_scripts_rendering_of_the_kept_runs():
    learning = _load("learning")
    kept = [ROOT / "docs" / "results" / "kernels_2026-12-07" / f"untrained-seed0-{k}.json" for k in ("avx2", "default")]
    assert learning.kernel_table([str(p) for p in kept]) == _block("learning.md", "learning-kernels")
    # the runs differ in their kernels and in nothing else that pairing compares
    from envace_gym.agents.provenance import pairing_mismatch

    envs = [json.loads(p.read_text())["environment"] for p in kept]
    assert pairing_mismatch(*envs) == ["cpu_capability"]


def test_the_decode_precision_block_is_the_scripts_rendering_of_the_kept_json():
    bench = _load("decode_precision")
    kept = json.loads((ROOT / "docs" / "results" / "decode_precision_2026-12-07.json").read_text())
    assert bench.table(kept) == _block("benchmarks.md", "decode-precision")
    assert kept["environment"]["cpu_capability"] and len(kept["runs"]) == 2 * kept["repeats"]


def test_the_transcript_outcomes_sort_each_logged_imagined_episode(tmp_path):
    """Five hand-made training episodes, one of each ending: counted per kind, and the table shows the
    shares pooled over the arm's seeds."""
    learning = _load("learning")

    def line(reward, reference, calls, valid=()):
        episode = {"reward": reward, "calls_ok": calls, "calls_failed": 0}
        if reference is not None:
            episode["reward_reference"] = reference
        return json.dumps({"episode": episode, "env_role_samples": [{"valid": v} for v in valid]})

    logged = tmp_path / "trajectories"
    logged.mkdir()
    (logged / "step-3.jsonl").write_text(
        "\n".join([line(1.0, 0.0, 2, (True, True)), line(1.0, 1.0, 1, (True,)), line(0.0, None, 0)]) + "\n"
    )
    (logged / "step-6.jsonl").write_text("\n".join([line(0.0, None, 1, (False,)), line(0.0, 0.0, 1, (True,))]) + "\n")
    counts = learning.transcript_outcomes(tmp_path)
    assert counts == {"bound_only": 1, "both": 1, "no_call": 1, "unusable": 1, "failed": 1}
    assert learning.transcript_outcomes(tmp_path / "nothing") is None
    rows = learning.transcript_table({"envace-blind": {"transcripts": counts}}).splitlines()
    assert rows[2] == "| envace-blind | 5 | 20% | 20% | 20% | 20% | 20% |"
