"""Role-wise GRPO: advantages against hand-computed values, masks, and the objective's gradient."""

from __future__ import annotations

import pytest
import torch

from envace_gym.agents.lm.policy import tiny_policy
from envace_gym.agents.rollout.loop import EpisodeResult, Trajectory
from envace_gym.agents.train.objective import Sample, build_samples, collate, compute_advantages, sample_loss
from envace_gym.imagination import EnvRoleSample


def _row(group: str, reward: float, role: str = "actor") -> Sample:
    return Sample(f"{group}/{role}", role, [1, 2, 3], [0, 1, 1], [0.0, -1.0, -1.0], reward)


def test_advantages_are_mean_centred_per_task_and_role_with_rows_pooled():
    # task A: actor rewards 1, 0, 0, 1; its env-role group pools 5 rows from trajectory 1 and 1 from 2.
    rows = [_row("A", r) for r in (1.0, 0.0, 0.0, 1.0)]
    env = [_row("A", 1.0, "env_role") for _ in range(5)] + [_row("A", 0.0, "env_role")]
    other = [_row("B", 0.5), _row("B", 0.5)]
    single = [_row("C", 1.0)]
    compute_advantages(rows + env + other + single)
    assert [r.advantage for r in rows] == pytest.approx([0.5, -0.5, -0.5, 0.5])
    mean = 5 / 6  # pooled: five rows of 1.0 and one of 0.0
    assert [r.advantage for r in env] == pytest.approx([1 - mean] * 5 + [-mean])
    assert [r.advantage for r in other] == [0.0, 0.0]  # no spread, no signal
    assert single[0].advantage == 0.0  # a group of one


def test_scale_rewards_group_divides_by_the_unbiased_std():
    rows = [_row("A", r) for r in (1.0, 0.0, 0.0, 0.0)]
    compute_advantages(rows, scale_rewards="group")
    std = (((0.75**2) + 3 * (0.25**2)) / 3) ** 0.5
    assert [r.advantage for r in rows] == pytest.approx([0.75 / std, -0.25 / std, -0.25 / std, -0.25 / std], rel=1e-5)
    with pytest.raises(ValueError, match="scale_rewards"):
        compute_advantages(rows, scale_rewards="batch")


def _trajectory(reward: float, failed: int = 0, samples=()) -> Trajectory:
    ep = EpisodeResult("t-1", "bank", reward, reward >= 1, {}, 2, False, 1, failed)
    roles = ["prompt"] * 4 + ["actor"] * 3 + ["external"] * 2 + ["env_role"] * 2 + ["user"] * 2 + ["actor"] * 2
    ids = list(range(10, 10 + len(roles)))
    logprobs = [-0.5 if r in ("actor", "env_role") else 0.0 for r in roles]
    return Trajectory(ep, ids, roles, logprobs, list(samples))


def test_samples_mask_everything_but_actor_tokens_and_env_role_samples_carry_the_trajectory_reward():
    env_sample = EnvRoleSample([1, 2, 3], [7, 8], [-0.1, -0.2], valid=True)
    bad = EnvRoleSample([1, 2, 3], [9], [-0.3], valid=False)
    traj = _trajectory(1.0, samples=[env_sample, bad])
    rows = build_samples([traj], ["g"], [1.0], invalid_penalty=0.1)
    actor = [r for r in rows if r.role == "actor"]
    env = [r for r in rows if r.role == "env_role"]
    assert len(actor) == 1 and len(env) == 2
    assert actor[0].loss_mask == traj.actor_mask()  # env_role-tagged stream tokens are context, not targets
    assert sum(actor[0].loss_mask) == 5
    assert env[0].input_ids == [1, 2, 3, 7, 8] and env[0].loss_mask == [0, 0, 0, 1, 1]
    assert env[0].reward == 1.0  # the trajectory's reward
    assert env[1].reward == pytest.approx(0.9)  # an unusable answer is penalised
    frozen = build_samples([traj], ["g"], [1.0], train_env_role=False)
    assert [r.role for r in frozen] == ["actor"]
    penalised = build_samples([_trajectory(0.0, failed=1)], ["g"], [0.0], invalid_penalty=0.1)
    assert penalised[0].reward == pytest.approx(-0.1) and not penalised[0].valid


def test_grounding_rows_only_where_a_target_is_known():
    grounded = EnvRoleSample([1, 2, 3], [7, 8], [-0.1, -0.2], target="real")
    plain = EnvRoleSample([1, 2, 4], [7], [-0.1])
    traj = _trajectory(0.0, samples=[grounded, plain])
    rows = build_samples([traj], ["g"], [0.0], encode_target=lambda text: [42, 43])
    ground = [r for r in rows if r.role == "grounding"]
    assert len(ground) == 1
    assert ground[0].input_ids == [1, 2, 3, 42, 43] and ground[0].loss_mask == [0, 0, 0, 1, 1]
    assert not [r for r in build_samples([traj], ["g"], [0.0], train_env_role=False) if r.role == "grounding"]


@pytest.fixture(scope="module")
def model():
    return tiny_policy(seed=3).model.float().eval()


def _rl_rows(seed: int = 0) -> list[Sample]:
    g = torch.Generator().manual_seed(seed)
    rows = []
    for i, adv in enumerate((0.75, -0.25, -0.5)):
        n = 12 + 3 * i
        ids = [5, 6, 7, 8] + torch.randint(100, 2000, (n - 4,), generator=g).tolist()  # a shared 4-token head
        mask = [0] * 6 + [1] * (n - 6)
        if i == 1:
            mask[8] = 0  # a masked tool-result token inside the row
        rows.append(Sample("g/actor", "actor", ids, mask, [0.0] * n, 0.0, advantage=adv))
    return rows


def _plain_logprobs(model, row: Sample) -> torch.Tensor:
    """Logprobs of the row's trained tokens from an ordinary full forward pass."""
    ids = torch.tensor([row.input_ids])
    logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), dim=-1)
    target = ids[0, 1:]
    per_token = logp.gather(1, target[:, None]).squeeze(1)
    return per_token[torch.tensor(row.loss_mask[1:], dtype=torch.bool)]


def test_objective_gradient_equals_reinforce_when_nothing_is_clipped(model):
    rows = _rl_rows()
    with torch.no_grad():  # old logprobs = the current ones: ratio 1, no clipping active
        for r in rows:
            old = _plain_logprobs(model, r).tolist()
            it = iter(old)
            r.old_logprobs = [next(it) if m and j > 0 else 0.0 for j, m in enumerate(r.loss_mask)]
    n_tokens = sum(r.tokens for r in rows)
    model.zero_grad()
    parts = sample_loss(model, collate(rows, pad_id=0, shared_prefix=False))
    (parts.pg / n_tokens).backward()
    ours = [p.grad.clone() for p in model.parameters()]
    assert parts.clipped == 0
    model.zero_grad()
    reinforce = sum(-(r.advantage * _plain_logprobs(model, r)).sum() for r in rows) / n_tokens
    reinforce.backward()
    for a, b in zip(ours, (p.grad for p in model.parameters()), strict=True):
        assert torch.allclose(a, b, atol=1e-5), (a - b).abs().max()


def test_shared_prefix_gives_the_same_loss_and_masks_carry_no_gradient(model):
    rows = _rl_rows()
    full = sample_loss(model, collate(rows, 0, shared_prefix=False)).pg
    shared_batch = collate(rows, 0, shared_prefix=True)
    assert shared_batch["head_ids"].shape[1] == 4
    shared = sample_loss(model, shared_batch).pg
    assert torch.allclose(full, shared, atol=1e-5)


def test_only_actor_tokens_are_scored_in_the_actor_loss(model):
    traj = _trajectory(1.0, samples=[EnvRoleSample([1, 2], [3], [-0.1])])
    (actor,) = [r for r in build_samples([traj], ["g"], [1.0], train_env_role=False)]
    actor.advantage = 1.0
    batch = collate([actor], 0, shared_prefix=False)
    scored = (batch["labels"][0] != -100).nonzero().flatten().tolist()
    assert scored == [i for i, role in enumerate(traj.roles) if role == "actor"]
    # gradient check: the loss's gradient w.r.t. each position's logits is zero off the actor positions
    ids = batch["input_ids"]
    logits = model(input_ids=ids).logits.detach().requires_grad_(True)
    logp = torch.log_softmax(logits[0, :-1], dim=-1).gather(1, ids[0, 1:, None]).squeeze(1)
    keep = batch["labels"][0, 1:] != -100
    (-(logp[keep])).sum().backward()
    touched = (logits.grad[0].abs().sum(dim=-1) > 0).nonzero().flatten().tolist()
    predicted = [i + 1 for i in touched]  # logits at position i predict token i + 1
    assert set(predicted) == {i for i, role in enumerate(traj.roles) if role == "actor"}


def test_clipping_and_dual_clip_bound_the_loss(model):
    rows = _rl_rows()
    for r in rows:  # old logprobs far below the current ones: ratios >> 1
        r.old_logprobs = [-30.0 if m else 0.0 for m in r.loss_mask]
    batch = collate(rows, 0, False)
    parts = sample_loss(model, batch, clip_low=0.2, clip_high=0.2, dual_clip=3.0)
    adv = batch["advantages"]
    # positive advantages are clipped at ratio 1.2; negative ones are bounded by -adv * 3 (dual clip)
    expected = torch.where(adv > 0, -adv * 1.2, -adv * 3.0).sum()
    assert torch.allclose(parts.pg, expected, atol=1e-4)
    assert parts.clipped == int((adv > 0).sum())
