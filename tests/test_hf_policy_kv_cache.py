"""HFSortPolicy samples with the model's KV cache: the same tokens as re-running the prefix."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from pgrl_helpers import hf_policy, trl_bridge  # noqa: E402
from pgrl_helpers.sort_task import make_prompts  # noqa: E402

V, L = 6, 3


def decode_without_cache(policy, prompts, num_samples, generator, greedy):
    """The reference: every step runs the whole prefix through the model again."""
    ids = policy.prompt_ids(prompts).repeat_interleave(num_samples, dim=0)
    values = []
    with torch.no_grad():
        for _ in range(policy.response_length):
            logits = policy.model(input_ids=ids).logits[:, -1].float()
            log_probs = torch.log_softmax(logits, dim=-1)[:, policy.digit_ids]
            if greedy:
                value = log_probs.argmax(dim=-1)
            else:
                value = torch.multinomial(log_probs.exp(), 1, generator=generator)[:, 0]
            values.append(value)
            ids = torch.cat([ids, policy.digit_ids[value][:, None]], dim=1)
    return torch.stack(values, dim=-1).reshape(prompts.shape[0], num_samples, -1)


@pytest.mark.parametrize("seed", range(3))
def test_cached_sampling_gives_the_same_responses_for_the_same_seed(seed):
    tokenizer = trl_bridge.build_sort_tokenizer(V)
    model = trl_bridge.build_tiny_gpt2(tokenizer, n_layer=2, n_embd=16, n_head=2, seed=seed)
    policy = hf_policy.HFSortPolicy(hf_policy.constrain_to_digits(model, tokenizer), tokenizer, L)
    prompts = make_prompts(8, L, V, seed)
    got, _ = policy.sample(prompts, 6, torch.Generator().manual_seed(seed))
    want = decode_without_cache(policy, prompts, 6, torch.Generator().manual_seed(seed), False)
    assert torch.equal(got, want)
    assert torch.equal(policy.greedy(prompts), decode_without_cache(policy, prompts, 1, None, True))
