"""Scripted token choices for a real engine: tests of token bookkeeping with a tiny random model."""

import torch


class ForcedTokens:
    """Replaces the engine's sampler: each ``generate`` call emits the next scripted text (then the stop
    token), with the model's real log-probabilities of those tokens."""

    def __init__(self, policy, texts):
        self.policy = policy
        self.queue = [policy.chat.encode(t) for t in texts]
        self.rows: list[list[int]] = []
        self.stop = policy.engine.stop_token_ids[0]
        self.calls: list[dict] = []  # per generate call: prompt tokens encoded (after cache reuse)
        original = policy.engine._generate

        def generate(prompts, sampling, keys, generator, prefix_lens):
            self.rows = [self.queue.pop(0) + [self.stop] for _ in prompts]
            gens = original(prompts, sampling, keys, generator, prefix_lens)
            self.calls.extend({"prompt_tokens": g.prompt_tokens, "keys": keys} for g in gens)
            return gens

        policy.engine._generate = generate

    def sample(self, logits, cfg, generator):
        logp = torch.log_softmax(logits.float(), dim=-1)
        tokens = torch.tensor([row.pop(0) if row else self.stop for row in self.rows])
        return tokens, logp.gather(1, tokens[:, None]).squeeze(1)


def force_text(policy, monkeypatch, text: str, times: int = 256) -> ForcedTokens:
    """Every generation of ``policy`` (up to ``times`` rows in all) is ``text`` then the stop token: a test
    sees the same tokens whatever a random model would sample under this CPU's float kernels."""
    from envace_gym.agents.lm import engine as engine_module

    forced = ForcedTokens(policy, [text] * times)
    monkeypatch.setattr(engine_module, "_sample", forced.sample)
    return forced
