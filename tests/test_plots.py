from __future__ import annotations

import json

import pytest

from envace_gym.agents.train.plots import plot_learning_curve

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_plot_has_both_roles(tmp_path):
    records = [
        {
            "step": s,
            "reward_actor": 0.1 * s,
            "success_actor": s / 5,
            "reward_env_role": None if s == 3 else 0.5,
            "valid_env_role": 1.0,
            "n_env_role": 0 if s == 3 else 4,
        }
        for s in range(1, 6)
    ]
    metrics = _write(tmp_path / "metrics.jsonl", records)
    out = plot_learning_curve(metrics, tmp_path / "plots" / "curve.png", title="run")
    assert out == tmp_path / "plots" / "curve.png"
    assert out.read_bytes().startswith(PNG_MAGIC) and out.stat().st_size > 1000


def test_plot_without_env_role_keys(tmp_path):
    metrics = _write(tmp_path / "m.jsonl", [{"step": s, "reward_actor": 1.0, "success_actor": True} for s in range(3)])
    metrics.write_text(metrics.read_text() + "\n")  # a trailing blank line is fine
    assert plot_learning_curve(metrics, tmp_path / "c.png").read_bytes().startswith(PNG_MAGIC)


def test_bad_metrics_are_named(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(ValueError, match="empty.jsonl: no metrics"):
        plot_learning_curve(empty, tmp_path / "e.png")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"step": 1, "reward_actor": 0.5}\n{"step": 2, "reward_\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: not JSON"):
        plot_learning_curve(bad, tmp_path / "b.png")
    assert not (tmp_path / "b.png").exists()


def _bars(fig):
    from matplotlib.patches import Rectangle

    return [p for p in fig.axes[0].patches if isinstance(p, Rectangle)]


def test_plot_by_domain_draws_each_domains_success_and_the_overall_with_wilson_intervals(tmp_path):
    from envace_gym.agents.eval.plots import plot_by_domain
    from envace_gym.agents.eval.stats import wilson_interval

    by_domain = {"bank": {"success_rate": 0.75, "episodes": 8}, "files": {"success_rate": 0.25, "episodes": 4}}
    summary = {"by_domain": by_domain, "success_rate": 7 / 12, "episodes": 12, "policy": "oracle"}
    summary |= {"suite": "builtin", "split": "test", "backend": "real"}
    fig = plot_by_domain(summary, tmp_path / "p" / "by_domain.png")
    assert (tmp_path / "p" / "by_domain.png").read_bytes().startswith(PNG_MAGIC)
    assert [b.get_height() for b in _bars(fig)] == [0.75, 0.25, 7 / 12]
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["bank", "files", "all"]
    assert fig.axes[0].get_title() == "oracle on builtin (split=test, backend=real)"
    # the error bar of "files" spans its Wilson interval (1 success of 4)
    lo, hi = wilson_interval(1, 4)
    from matplotlib.container import ErrorbarContainer

    errorbar = next(c for c in fig.axes[0].containers if isinstance(c, ErrorbarContainer))
    (_, bottom), (_, top) = errorbar.lines[2][0].get_segments()[1]
    assert (bottom, top) == (pytest.approx(lo), pytest.approx(hi))


def test_envace_eval_plot_writes_the_summarys_rates_and_needs_out(tmp_path, capsys, monkeypatch):
    import envace_gym.agents.eval.plots as plots
    from envace_gym.cli import main

    drawn = []
    real = plots.plot_by_domain
    monkeypatch.setattr(plots, "plot_by_domain", lambda summary, out: drawn.append(real(summary, out)) or drawn[-1])
    argv = ["eval", "--suite", "builtin", "--policy", "random", "--episodes", "8", "--seed", "3", "--no-progress"]
    assert main([*argv, "--out", str(tmp_path), "--plot", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["plot"] == str(tmp_path / "eval_by_domain.png")
    assert (tmp_path / "eval_by_domain.png").read_bytes().startswith(PNG_MAGIC)
    expected = [s["success_rate"] for s in summary["by_domain"].values()] + [summary["success_rate"]]
    assert [b.get_height() for b in _bars(drawn[0])] == expected and len(expected) == 5
    assert main([*argv, "--plot"]) == 2
    assert capsys.readouterr().err.strip() == (
        "envace: error: --plot writes eval_by_domain.png into the --out folder: give --out DIR"
    )
