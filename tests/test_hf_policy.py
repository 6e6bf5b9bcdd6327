"""Tests of pgrl_helpers.hf.hf_policy: the TRL bridge's GPT-2 trained by our own loop.

Skipped only when the optional extra (requirements-scale.txt: transformers, tokenizers) is
not installed.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from pgrl_helpers.config import TrainConfig  # noqa: E402
from pgrl_helpers.hf import hf_policy, trl_bridge  # noqa: E402
from pgrl_helpers.policy import Policy, check_policy_fits  # noqa: E402
from pgrl_helpers.sort_task import make_prompts  # noqa: E402
from pgrl_helpers.training import run_policy_gradient  # noqa: E402

V, L = 6, 3


def build(seed: int = 0, constrain: bool = True):
    tokenizer = trl_bridge.build_sort_tokenizer(V)
    model = trl_bridge.build_tiny_gpt2(tokenizer, n_layer=1, n_embd=16, n_head=2, seed=seed)
    if constrain:
        hf_policy.constrain_to_digits(model, tokenizer)
    return tokenizer, model


def direct_log_probs(model, tokenizer, prompts, responses):
    """The TRL bridge's own per-token log-probs of the same completions, as text ids."""
    batch, trial, pos = responses.shape
    prompt_ids = tokenizer([trl_bridge.format_prompt(p) for p in prompts.tolist()])["input_ids"]
    prompt_ids = torch.tensor(prompt_ids).repeat_interleave(trial, dim=0)
    texts = [" ".join(map(str, r)) for r in responses.reshape(-1, pos).tolist()]  # '1 3 4'
    completion_ids = torch.tensor(tokenizer(texts)["input_ids"])
    with torch.no_grad():
        return trl_bridge.completion_log_probs(model, prompt_ids, completion_ids).reshape(
            batch, trial, pos
        )


def test_policy_interface_and_shapes():
    tokenizer, model = build()
    policy = hf_policy.HFSortPolicy(model, tokenizer, L)
    assert isinstance(policy, Policy)
    check_policy_fits(policy, V, L, L)
    prompts = make_prompts(4, L, V, generator=0)
    responses, mask = policy.sample(prompts, 5, torch.Generator().manual_seed(0))
    assert responses.shape == mask.shape == (4, 5, L) and bool((mask == 1).all())
    assert responses.min() >= 0 and responses.max() < V
    assert policy.log_probs(prompts, responses).shape == (4, 5, L)
    assert policy.token_entropy(prompts, responses).shape == (4, 5, L)
    assert policy.greedy(prompts).shape == (4, 1, L)


def test_log_probs_match_a_direct_forward_of_the_text():
    tokenizer, model = build()
    policy = hf_policy.HFSortPolicy(model, tokenizer, L)
    prompts = make_prompts(5, L, V, generator=1)
    responses = torch.randint(0, V, (5, 3, L), generator=torch.Generator().manual_seed(1))
    ours = policy.log_probs(prompts, responses).detach()
    torch.testing.assert_close(ours, direct_log_probs(model, tokenizer, prompts, responses))
    # the digits carry all the probability: per slot, the V digits' probabilities sum to 1
    full = policy._log_softmax(prompts, responses).exp()
    torch.testing.assert_close(full[..., policy.digit_ids].sum(-1), torch.ones(5, 3, L))


def test_sampling_is_seeded_and_follows_the_policy():
    tokenizer, model = build()
    policy = hf_policy.HFSortPolicy(model, tokenizer, L)
    prompts = make_prompts(2, L, V, generator=2)
    a, _ = policy.sample(prompts, 4, torch.Generator().manual_seed(3))
    b, _ = policy.sample(prompts, 4, torch.Generator().manual_seed(3))
    assert torch.equal(a, b)
    # first-token frequencies over many samples match the model's first-slot distribution
    many, _ = policy.sample(prompts[:1], 4000, torch.Generator().manual_seed(4))
    probs = policy.log_probs(prompts[:1], many[:, :1]).exp()  # [1, 1, L]
    first_slot = policy._log_softmax(prompts[:1], many[:, :1])[0, 0, 0, policy.digit_ids].exp()
    freq = torch.bincount(many[0, :, 0], minlength=V).float() / 4000
    assert (freq - first_slot.detach()).abs().max() < 0.03, (freq, first_slot)
    assert probs.shape == (1, 1, L)


def test_entropy_reuses_the_forward_only_for_the_same_tensors():
    tokenizer, model = build()
    policy = hf_policy.HFSortPolicy(model, tokenizer, L)
    prompts = make_prompts(3, L, V, generator=5)
    responses, mask = policy.sample(prompts, 2, torch.Generator().manual_seed(5))
    fresh = policy.token_entropy(prompts, responses).detach()
    policy.log_probs(prompts, responses)
    torch.testing.assert_close(policy.token_entropy(prompts, responses).detach(), fresh)
    other = (responses + 1) % V  # a different batch after log_probs: no stale reuse
    policy.log_probs(prompts, responses)
    expected = hf_policy.HFSortPolicy(model, tokenizer, L).token_entropy(prompts, other)
    torch.testing.assert_close(policy.token_entropy(prompts, other), expected)
    assert (
        0
        < float(policy.mean_entropy(prompts, responses, mask).detach())
        <= float(torch.log(torch.tensor(V)))
    )


def test_generate_writes_only_digits():
    tokenizer, model = build()
    encoded = tokenizer([trl_bridge.format_prompt([1, 2, 0])] * 64, return_tensors="pt")
    torch.manual_seed(0)
    out = model.generate(**encoded, max_new_tokens=L, do_sample=True, top_k=0)
    new = out[:, encoded["input_ids"].shape[1] :]
    assert torch.isin(new, hf_policy.digit_token_ids(tokenizer)).all()


def test_run_policy_gradient_trains_the_hf_model():
    tokenizer, model = build(seed=1)
    policy = hf_policy.HFSortPolicy(model, tokenizer, L)
    config = TrainConfig(
        deltas_mode="normalized_rewards",
        loss_mode="clipped",
        entropy_coef=0.05,
        num_epochs=3,
        num_steps_per_epoch=2,
        num_responses=4,
        prompt_source="random",
        prompts_per_epoch=4,
        prompt_length=L,
        vocab_size=V,
        reward_fn="sort_distance_reward",
        learning_rate=1e-2,
        num_eval_prompts=4,
    )
    before = {k: v.clone() for k, v in model.state_dict().items()}
    history = run_policy_gradient(config, policy=policy)
    steps = history.steps()
    assert len(steps) == 6
    changed = [k for k, v in model.state_dict().items() if not torch.equal(v, before[k])]
    assert "transformer.wte.weight" in changed
    assert "lm_head.bias" not in changed  # the digit constraint is frozen
    # after training, log_probs still equal the direct forward of the text
    prompts = make_prompts(3, L, V, generator=6)
    responses, _ = policy.sample(prompts, 2, torch.Generator().manual_seed(6))
    torch.testing.assert_close(
        policy.log_probs(prompts, responses).detach(),
        direct_log_probs(model, tokenizer, prompts, responses),
    )


def test_bad_inputs_raise():
    tokenizer, model = build(constrain=False)
    with pytest.raises(ValueError, match="constrain_to_digits"):
        hf_policy.HFSortPolicy(model, tokenizer, L)
    hf_policy.constrain_to_digits(model, tokenizer)
    with pytest.raises(ValueError, match="already has a bias"):
        hf_policy.constrain_to_digits(model, tokenizer)
    with pytest.raises(ValueError, match="prompt_length"):
        hf_policy.HFSortPolicy(model, tokenizer, 0)
    policy = hf_policy.HFSortPolicy(model, tokenizer, L)
    with pytest.raises(ValueError, match="prompts"):
        policy.sample(torch.tensor([[0, 1, V]]), 2)
    with pytest.raises(ValueError, match="responses"):
        policy.log_probs(torch.tensor([[0, 1, 2]]), torch.full((1, 1, L), V))


# --- sampling with the KV cache ---
# HFSortPolicy samples with the model's KV cache: the same tokens as re-running the prefix.


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
