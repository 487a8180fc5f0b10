import json

from envace_gym.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_eval_json_oracle_and_noop(capsys, tmp_path):
    code, out, _ = run(
        capsys,
        "eval",
        "--suite",
        "builtin/bank",
        "--policy",
        "oracle",
        "--episodes",
        "30",
        "--json",
        "--no-progress",
        "--out",
        str(tmp_path),
    )
    summary = json.loads(out)
    assert code == 0 and summary["success_rate"] == 1.0 and summary["episodes"] == 30
    assert summary["by_domain"]["bank"]["episodes"] == 30 and summary["mean_reward"] == 1.0
    lines = (tmp_path / "episodes.jsonl").read_text().splitlines()
    assert len(lines) == 30 and json.loads(lines[0])["messages"][0]["role"] == "system"
    code, out, _ = run(
        capsys, "eval", "--suite", "builtin/bank", "--policy", "noop", "--episodes", "30", "--json", "--no-progress"
    )
    assert code == 0 and json.loads(out)["success_rate"] < 0.3


def test_eval_table_output(capsys):
    code, out, _ = run(
        capsys, "eval", "--suite", "builtin/bank", "--policy", "random", "--episodes", "5", "--no-progress"
    )
    assert code == 0 and "bank" in out and "success" in out


def test_list_json(capsys):
    code, out, _ = run(capsys, "list", "--json")
    data = json.loads(out)
    assert "EnvACE-ToolCall-v0" in data["envs"]
    bank = next(s for s in data["suites"] if s["suite"] == "builtin/bank")
    assert bank["splits"] == {"test": 150, "train": 600}


def test_user_errors_are_one_line(capsys, tmp_path):
    for argv in (["eval", "--suite", "nope"], ["eval", "--env", "Nope-v0"], ["eval", "--policy", "genius"]):
        code, out, err = run(capsys, *argv)
        assert code == 2 and err.count("\n") == 1 and err.startswith("envace: error:"), err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x", "user_turns": []}\n')
    code, _, err = run(capsys, "eval", "--suite", str(bad))
    assert code == 2 and "bad.jsonl:1: field 'user_turns'" in err and err.count("\n") == 1


def test_fidelity_json_fields_on_the_tiny_model(capsys, tmp_path):
    code, out, _ = run(
        capsys,
        "fidelity",
        "--policy",
        "tiny",
        "--suite",
        "builtin/bank",
        "--episodes",
        "2",
        "--json",
        "--no-progress",
        "--max-new-tokens",
        "16",
        "--out",
        str(tmp_path),
    )
    report = json.loads(out)
    assert code == 0 and set(report["backends"]) == {"self", "self-inline"}
    for name, mode in (("self", "prompted"), ("self-inline", "inline")):
        b = report["backends"][name]
        assert b["mode"] == mode and b["calls"] >= 2
        assert {"parse_valid_rate", "schema_valid_rate", "exact_match", "key_f1", "success_agreement"} <= set(b)
    assert (tmp_path / "fidelity.json").exists() and (tmp_path / "fidelity.png").exists()
    code, _, err = run(capsys, "fidelity", "--policy", "tiny", "--backends", "dream")
    assert code == 2 and "--backends" in err


def test_eval_with_imagined_backends_reports_metrics(capsys):
    for backend in ("self", "self-inline"):
        code, out, _ = run(
            capsys,
            "eval",
            "--suite",
            "builtin/bank",
            "--policy",
            "tiny",
            "--backend",
            backend,
            "--episodes",
            "2",
            "--max-new-tokens",
            "8",
            "--max-turns",
            "2",
            "--json",
            "--no-progress",
        )
        summary = json.loads(out)
        assert code == 0 and summary["backend"] == backend and summary["episodes"] == 2 and "valid_call_rate" in summary
    code, _, err = run(capsys, "eval", "--suite", "builtin/bank", "--policy", "oracle", "--backend", "self-inline")
    assert code == 2 and "needs an LM policy" in err
