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
