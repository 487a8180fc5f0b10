from __future__ import annotations

import json
import pickle
import random
import struct

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from envace_gym.agents.lm.models import tiny_model
from envace_gym.agents.lm.policy import LMPolicy
from envace_gym.agents.train.checkpoint import (
    CKPT_PREFIX,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    save_checkpoint,
)

CONFIG = 'lr = 1e-3\nsuite = "builtin/bank"\n'


def _trainer(seed: int = 0):
    model, tok = tiny_model(seed, 2, 64)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 4))
    return model, tok, optimizer, scheduler


def _train(model, optimizer, scheduler, steps: int) -> list[torch.Tensor]:
    """Steps on batches drawn from the global torch RNG, so a resume must also restore the RNG to match."""
    losses = []
    for _ in range(steps):
        ids = torch.randint(0, 500, (2, 12))
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        losses.append(loss.detach().clone())
    return losses


def _draws():
    return torch.rand(4), np.random.rand(4), random.random()


def _weights(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_resume_is_bit_for_bit(tmp_path, monkeypatch):
    model, tok, optimizer, scheduler = _trainer(0)
    model2, _, optimizer2, scheduler2 = _trainer(1)  # other weights: the load must overwrite all of them

    # From here on nothing may pickle, on save or load (the imports above do, legitimately).
    def refuse(*args, **kwargs):
        raise AssertionError("pickle used")

    for name in ("dump", "dumps", "load", "loads"):
        monkeypatch.setattr(pickle, name, refuse)
    monkeypatch.setattr(torch, "save", refuse)
    monkeypatch.setattr(torch, "load", refuse)

    torch.manual_seed(0), np.random.seed(0), random.seed(0)
    _train(model, optimizer, scheduler, 3)
    path = save_checkpoint(tmp_path, 3, model, tok, optimizer, scheduler, CONFIG, state={"episodes": 12})
    assert path == tmp_path / "ckpt-3" and latest_checkpoint(tmp_path) == path
    assert (path / "config.toml").read_text() == CONFIG
    draws = _draws()
    losses = _train(model, optimizer, scheduler, 4)
    weights, last_lr = _weights(model), scheduler.get_last_lr()

    torch.manual_seed(99), np.random.seed(99), random.seed(99)
    assert load_checkpoint(path, model2, optimizer2, scheduler2) == {"step": 3, "episodes": 12}
    assert scheduler2.last_epoch == 3 and scheduler2._step_count == 4 and scheduler2.base_lrs == [1e-3]
    draws2 = _draws()
    assert torch.equal(draws[0], draws2[0]) and np.array_equal(draws[1], draws2[1]) and draws[2] == draws2[2]
    losses2 = _train(model2, optimizer2, scheduler2, 4)
    assert all(torch.equal(a, b) for a, b in zip(losses, losses2, strict=True))
    weights2 = _weights(model2)
    assert weights.keys() == weights2.keys() and all(torch.equal(weights[k], weights2[k]) for k in weights)
    assert scheduler2.get_last_lr() == last_lr
    assert model2.lm_head.weight.data_ptr() == model2.model.embed_tokens.weight.data_ptr()  # still tied


def test_optimizer_and_scheduler_files_round_trip(tmp_path):
    model, tok, optimizer, scheduler = _trainer(0)
    _train(model, optimizer, scheduler, 2)
    path = save_checkpoint(tmp_path, 2, model, tok, optimizer, scheduler, CONFIG)
    fresh, _, optimizer2, scheduler2 = _trainer(0)
    load_checkpoint(path, fresh, optimizer2, scheduler2, restore_rng=False)
    a, b = optimizer.state_dict(), optimizer2.state_dict()
    assert a["param_groups"] == b["param_groups"]  # betas stay tuples, initial_lr and lr are exact
    assert a["state"].keys() == b["state"].keys()
    for i, entry in a["state"].items():
        assert entry.keys() == b["state"][i].keys()
        assert all(torch.equal(entry[k], b["state"][i][k]) for k in entry)
    assert scheduler.state_dict() == scheduler2.state_dict()
    assert {"state", "param_groups"} <= json.loads((path / "optimizer.json").read_text()).keys()
    tensors = path / "optimizer.safetensors"
    keys = json.loads(tensors.read_bytes()[8 : 8 + _header_len(tensors)])
    assert "state.0.exp_avg" in keys and "state.0.step" in keys


def _header_len(path) -> int:
    return struct.unpack("<Q", path.read_bytes()[:8])[0]


def test_keep_last_prunes_and_sorts_numerically(tmp_path):
    model, tok, optimizer, scheduler = _trainer(0)
    for step in (8, 9, 10, 11):
        save_checkpoint(tmp_path, step, model, tok, optimizer, scheduler, CONFIG, keep_last=2)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["ckpt-10", "ckpt-11"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-10", "ckpt-11"]  # no temp folders left
    save_checkpoint(tmp_path, 9, model, tok, optimizer, scheduler, CONFIG, keep_last=None)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["ckpt-9", "ckpt-10", "ckpt-11"]
    assert latest_checkpoint(tmp_path).name == "ckpt-11"
    with pytest.raises(ValueError, match="keep_last"):
        save_checkpoint(tmp_path, 12, model, tok, optimizer, scheduler, CONFIG, keep_last=0)


def test_a_cut_off_checkpoint_is_never_loaded(tmp_path, monkeypatch):
    model, tok, optimizer, scheduler = _trainer(0)
    first = save_checkpoint(tmp_path, 1, model, tok, optimizer, scheduler, CONFIG)

    def crash():
        raise RuntimeError("disk full")

    monkeypatch.setattr(scheduler, "state_dict", crash)  # after the weights and optimizer were written
    with pytest.raises(RuntimeError, match="disk full"):
        save_checkpoint(tmp_path, 2, model, tok, optimizer, scheduler, CONFIG)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-1"]
    assert latest_checkpoint(tmp_path) == first
    monkeypatch.undo()

    # A folder cut off by other means (no trainer_state.json), and a temp folder of a killed process.
    cut = tmp_path / f"{CKPT_PREFIX}7"
    cut.mkdir()
    (cut / "model.safetensors").write_bytes((first / "model.safetensors").read_bytes())
    stale = tmp_path / ".ckpt-5.tmp-999999999"
    stale.mkdir()
    (stale / "trainer_state.json").write_text("{}")
    (tmp_path / "ckpt-x").mkdir()
    assert list_checkpoints(tmp_path) == [first] and latest_checkpoint(tmp_path) == first
    with pytest.raises(ValueError, match="ckpt-7: not a complete checkpoint"):
        load_checkpoint(cut, model)
    with pytest.raises(FileNotFoundError, match="ckpt-3"):
        load_checkpoint(tmp_path / "ckpt-3", model)
    save_checkpoint(tmp_path, 3, model, tok, optimizer, scheduler, CONFIG)
    assert not stale.exists() and cut.exists()  # crash leftovers are cleaned, other folders are not touched
    assert latest_checkpoint(tmp_path) == tmp_path / "ckpt-3"
    assert latest_checkpoint(tmp_path / "nowhere") is None


def test_checkpoint_loads_as_policy_and_rejects_other_models(tmp_path):
    model, tok, optimizer, scheduler = _trainer(0)
    _train(model, optimizer, scheduler, 1)
    path = save_checkpoint(tmp_path, 1, model, tok, optimizer, scheduler, CONFIG)
    policy = LMPolicy.from_spec(f"ckpt:{path}", bf16=False)
    loaded = policy.model.state_dict()
    assert all(torch.equal(v, loaded[k]) for k, v in model.state_dict().items())
    other, _ = tiny_model(0, 1, 64)  # one layer: the second layer's weights are unexpected
    with pytest.raises(ValueError, match="weights do not fit"):
        load_checkpoint(path, other, restore_rng=False)
    # lm_head.weight is absent from the file (tied to the embeddings) and accepted; another missing key is not.
    weights = load_file(str(path / "model.safetensors"))
    assert "lm_head.weight" not in weights
    del weights["model.norm.weight"]
    save_file(weights, str(path / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"missing \['model.norm.weight'\]"):
        load_checkpoint(path, model, restore_rng=False)


def test_no_file_is_a_pickle(tmp_path):
    model, tok, optimizer, scheduler = _trainer(0)
    _train(model, optimizer, scheduler, 1)
    path = save_checkpoint(tmp_path, 1, model, tok, optimizer, scheduler, CONFIG)
    names = {p.name for p in path.iterdir()}
    assert {"model.safetensors", "config.json", "optimizer.safetensors", "optimizer.json", "scheduler.json"} <= names
    assert {"rng.safetensors", "rng.json", "trainer_state.json", "config.toml", "tokenizer.json"} <= names
    for f in path.rglob("*"):
        if not f.is_file():
            continue
        data = f.read_bytes()
        assert f.suffix in {".json", ".safetensors", ".toml", ".txt", ".jinja"}, f.name
        assert not data.startswith((b"\x80", b"PK")), f.name  # pickle protocol 2+ / torch.save's zip
        if f.suffix == ".safetensors":
            header = json.loads(data[8 : 8 + _header_len(f)])
            assert isinstance(header, dict)
        elif f.suffix == ".json":
            json.loads(data)
        else:
            data.decode("utf-8")


def test_a_run_folder_loads_its_newest_complete_checkpoint_and_says_which(tmp_path, capsys):
    from envace_gym.agents.lm.models import ModelLoadError
    from envace_gym.cli import main

    model, tok, optimizer, scheduler = _trainer(0)
    save_checkpoint(tmp_path, 9, model, tok, optimizer, scheduler, CONFIG)
    _train(model, optimizer, scheduler, 1)
    newest = save_checkpoint(tmp_path, 10, model, tok, optimizer, scheduler, CONFIG)  # 10 after 9, not before
    torn = save_checkpoint(tmp_path, 11, model, tok, optimizer, scheduler, CONFIG)
    (torn / "trainer_state.json").unlink()  # incomplete: skipped, as --resume skips it
    capsys.readouterr()
    policy = LMPolicy.from_spec(f"ckpt:{tmp_path}", bf16=False)
    loaded = policy.model.state_dict()
    assert all(torch.equal(v, loaded[k]) for k, v in model.state_dict().items())
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"envace: ckpt:{tmp_path} -> {newest} (newest complete checkpoint)", err
    LMPolicy.from_spec(f"ckpt:{newest}", bf16=False)  # a checkpoint itself: loaded as it is, nothing said
    assert "newest complete checkpoint" not in capsys.readouterr().err

    code = main(["eval", "--policy", f"ckpt:{tmp_path}", "--episodes", "1", "--max-new-tokens", "4", "--json",
                 "--no-progress"])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0 and json.loads(out)["episodes"] == 1 and f"-> {newest} (newest complete checkpoint)" in err

    (tmp_path / "only-torn").mkdir()
    torn.rename(tmp_path / "only-torn" / "ckpt-11")
    with pytest.raises(ModelLoadError, match=r"only-torn is a training run folder with no complete checkpoint: "
                                             r"ckpt-11 lacks the weights or trainer_state.json"):  # fmt: skip
        LMPolicy.from_spec(f"ckpt:{tmp_path / 'only-torn'}")
    (tmp_path / "empty").mkdir()
    code = main(["eval", "--policy", f"ckpt:{tmp_path / 'empty'}", "--episodes", "1", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert err == (
        f"envace: error: {tmp_path / 'empty'} is neither a checkpoint (no config.json) nor a training run folder "
        f"(no ckpt-N/ inside); write one with `envace sft --out {tmp_path / 'empty'}` or `envace train --out "
        f"{tmp_path / 'empty'}`\n"
    )
