"""HFEngine's batch caches across turns: a call that continues the previous call's conversations appends to its
batch cache in place (nothing copied) and generates what packing the rows again would."""

import gymnasium as gym
import pytest
import torch

from envace_gym.agents.lm.engine import HFEngine, SamplingConfig
from envace_gym.agents.lm.policy import tiny_policy

GREEDY = SamplingConfig(temperature=0.0, max_new_tokens=10)


@pytest.fixture(scope="module")
def policy():
    return tiny_policy(seed=0)


def first_prompts(policy, n):
    env = gym.make("EnvACE-ToolCall-v0", suite="builtin/bank", split="test", max_turns=4)
    prompts, heads = [], []
    for seed in range(n):
        _, info = env.reset(seed=seed)  # different tasks: prompts of different lengths
        ids, head = policy.encode_prompt(info["messages"], info["tools"])
        prompts.append(ids)
        heads.append(head)
    return prompts, heads


def tool_turn(policy, row, turn):
    """A tool message of a different length per row and turn, then the next assistant header."""
    body = '{"balance": ' + "9" * (1 + 3 * row + turn) + "}"
    return policy.chat.encode(f"\n<|im_start|>tool\n{body}<|im_end|>\n<|im_start|>assistant\n")


def play(policy, keys, order, turns=3):
    """``turns`` turns of len(keys) conversations; each turn's call lists the rows in ``order(turn)``."""
    prompts, heads = first_prompts(policy, len(keys))
    gens_by_turn, repacked = [], []
    for turn in range(turns):
        rows = order(turn)
        before = policy.engine.stats["repacked_tokens"]
        gens = policy.generate_ids(
            [prompts[i] for i in rows],
            keys=[keys[i] for i in rows],
            sampling=GREEDY,
            prefix_lens=[heads[i] for i in rows] if turn == 0 else None,
        )
        repacked.append(policy.engine.stats["repacked_tokens"] - before)
        by_row = dict(zip(rows, gens, strict=True))
        gens_by_turn.append([by_row[i] for i in range(len(keys))])
        prompts = [p + by_row[i].token_ids + tool_turn(policy, i, turn) for i, p in enumerate(prompts)]
    for key in keys:
        policy.engine.drop(key)
    return gens_by_turn, repacked


def test_a_continued_batch_copies_no_cache_and_matches_a_repacked_one(policy):
    keys = ["a", "b", "c"]
    same, same_repacked = play(policy, keys, lambda turn: [0, 1, 2])
    # Each turn lists the rows in another order: the previous batch cannot be continued, rows are packed again.
    shuffled, shuffled_repacked = play(policy, keys, lambda turn: [[0, 1, 2], [2, 0, 1], [1, 2, 0]][turn])
    assert same_repacked[1:] == [0, 0]
    assert all(n > 0 for n in shuffled_repacked[1:])
    for turn_same, turn_shuffled in zip(same, shuffled, strict=True):
        assert [g.token_ids for g in turn_same] == [g.token_ids for g in turn_shuffled]
        assert [g.prompt_tokens for g in turn_same] == [g.prompt_tokens for g in turn_shuffled]
        for a, b in zip(turn_same, turn_shuffled, strict=True):
            assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5)


def test_a_conversation_leaving_the_batch_gets_its_cache_copied_out(policy):
    """After a call over a, b and c, a call over b alone reuses b's cached tokens (copied out of the batch)
    and generates what encoding b's whole prompt would; a dropped conversation is forgotten."""
    keys = ["a", "b", "c"]
    prompts, heads = first_prompts(policy, 3)
    gens = policy.generate_ids(prompts, keys=keys, sampling=GREEDY, prefix_lens=heads)
    follow = prompts[1] + gens[1].token_ids + tool_turn(policy, 1, 0)
    policy.engine.drop("a")
    reused = policy.generate_ids([follow], keys=["b"], sampling=GREEDY)[0]
    fresh = policy.generate_ids([follow], sampling=GREEDY)[0]
    assert reused.prompt_tokens == len(follow) - (len(prompts[1]) + len(gens[1].token_ids) - 1)
    assert reused.token_ids == fresh.token_ids
    assert torch.allclose(torch.tensor(reused.logprobs), torch.tensor(fresh.logprobs), atol=1e-5)
    assert "a" not in policy.engine._caches
    for key in keys:
        policy.engine.drop(key)
    assert not policy.engine._caches


@pytest.fixture(scope="module")
def varied():
    """A tiny policy whose greedy outputs vary (the tied embeddings of a random model make it repeat the
    prompt's last token): its own random output layer."""
    policy = tiny_policy(seed=0)
    weight = policy.model.lm_head.weight
    policy.model.lm_head.weight = torch.nn.Parameter(
        torch.randn(weight.shape, generator=torch.Generator().manual_seed(0))
    )
    return policy


def stops_apart(policy, prompts, heads, sampling):
    """Stop tokens that end the rows at very different steps: a token from each row's free-running output,
    taken at a later step for each row (the first one drawn in any row ends it)."""
    free = HFEngine(policy.model, policy.tokenizer, drop_finished=False)
    gens = free.generate(prompts, sampling, prefix_lens=heads, generator=torch.Generator().manual_seed(0))
    return sorted({g.token_ids[min(1 + 5 * i, len(g.token_ids) - 1)] for i, g in enumerate(gens)})


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_dropping_finished_rows_changes_no_token_nor_the_next_turn(varied, temperature):
    """Rows that stop early leave the decoding batch: the same tokens (greedy, and sampled with a seed: each row
    draws what it drew before), logprobs to float rounding, and caches from which the next turns continue as
    they do with every row kept: the same conversations in the same order (packed again from the rows' copies),
    in another order, then only the rows that were still decoding (their batch continued in place)."""
    policy = varied
    sampling = SamplingConfig(temperature=temperature, max_new_tokens=40, seed=3)
    prompts, heads = first_prompts(policy, 8)
    stops = stops_apart(policy, prompts, heads, sampling)
    keys = [f"row{i}" for i in range(8)]
    runs, survivors = {}, None
    for drop in (True, False):
        engine = HFEngine(policy.model, policy.tokenizer, stop_token_ids=stops, drop_finished=drop)
        convs, turns, repacked = [list(p) for p in prompts], [], []
        for turn, order in enumerate([range(8), range(8), [3, 1, 7, 0, 2, 6, 4, 5], None]):
            if order is None:  # the rows of the last call's live batch, in its order
                survivors = survivors or [int(k[3:]) for k in engine._caches[keys[2]].batch.keys]
                order = survivors
            before = engine.stats["repacked_tokens"]
            gens = engine.generate(
                [convs[i] for i in order],
                sampling,
                keys=[keys[i] for i in order],
                prefix_lens=[heads[i] for i in order] if turn == 0 else None,
                generator=torch.Generator().manual_seed(turn),
            )
            repacked.append(engine.stats["repacked_tokens"] - before)
            turns.append(gens)
            by_row = dict(zip(order, gens, strict=True))
            convs = [
                c + by_row[i].token_ids + tool_turn(policy, i, turn) if i in by_row else c for i, c in enumerate(convs)
            ]
        runs[drop] = turns, repacked, engine.stats
    (kept, _, kept_stats), (dropped, dropped_repacked, dropped_stats) = runs[False], runs[True]
    lengths = [len(g.token_ids) for g in kept[0]]
    assert min(lengths) <= 5 and max(lengths) >= 20, lengths  # rows finish far apart
    assert kept_stats["dropped_rows"] == 0 and dropped_stats["dropped_rows"] > 0
    assert kept_stats["reused_tokens"] == dropped_stats["reused_tokens"]  # every row's cache kept and reused
    assert dropped_repacked[3] == 0
    for turn_kept, turn_dropped in zip(kept, dropped, strict=True):
        assert [g.token_ids for g in turn_dropped] == [g.token_ids for g in turn_kept]
        assert [g.prompt_tokens for g in turn_dropped] == [g.prompt_tokens for g in turn_kept]
        for a, b in zip(turn_kept, turn_dropped, strict=True):
            assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5)
