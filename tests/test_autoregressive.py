"""Autoregressive policy (EOS, max length, masks, gradients) and the sort-dedup task."""

from __future__ import annotations

import pytest
import torch

from pgrl_helpers.advantages import compute_deltas
from pgrl_helpers.autoregressive import (
    AutoregressiveSortPolicy,
    compute_log_probs,
    greedy_responses,
    response_mask,
    sample_responses,
    sample_with_mask,
    token_entropy,
)
from pgrl_helpers.dedup_task import (
    compute_dedup_reward,
    content_lengths,
    dedup_exact_reward,
    dedup_position_reward,
    dedup_reference_responses,
    dedup_targets,
    exact_dedup,
)
from pgrl_helpers.losses import compute_per_token_loss
from pgrl_helpers.masking import LOSS_AGGREGATIONS, aggregate_loss
from pgrl_helpers.sort_task import make_prompts

V, P, R = 6, 4, 6  # values 0..5, prompts of 4, at most 6 response tokens
EOS = V


def policy(seed=0):
    return AutoregressiveSortPolicy(V, P, R, d_model=16, num_layers=1, num_heads=2, seed=seed)


def prompts(n=5, seed=0):
    return make_prompts(n, P, V, seed)


def test_response_mask_hand_case():
    responses = torch.tensor([[[1, 2, EOS, EOS], [EOS, 3, 3, 3], [1, 2, 3, 4]]])
    expected = torch.tensor([[[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]]], dtype=torch.float32)
    assert torch.equal(response_mask(responses, EOS), expected)
    assert response_mask(responses, EOS).sum(-1).tolist() == [[3, 1, 4]]
    assert content_lengths(responses, EOS).tolist() == [[2, 0, 4]]


def test_sampling_respects_eos_and_max_length():
    model = policy()
    g = torch.Generator().manual_seed(0)
    responses, mask = sample_with_mask(model, prompts(8), 16, g)
    assert responses.shape == (8, 16, R) and mask.shape == (8, 16, R)
    assert int(responses.max()) <= EOS  # the separator is never generated
    # after the first EOS there is only EOS padding
    after_eos = (mask == 0) & (responses != EOS)
    assert not after_eos.any()
    lengths = mask.sum(-1)
    assert lengths.min() >= 1 and lengths.max() <= R
    assert 1 < lengths.float().std()  # an untrained policy: lengths vary

    with torch.no_grad():  # never stop: every response is cut at the maximum length
        model.unembed.bias[EOS] = -1e4
    responses = sample_responses(model, prompts(3), 4, torch.Generator().manual_seed(1))
    assert responses.shape == (3, 4, R) and not (responses == EOS).any()
    assert (response_mask(responses, EOS) == 1).all()
    with torch.no_grad():  # always stop at once: one EOS, then padding
        model.unembed.bias[EOS] = 1e4
    responses = sample_responses(model, prompts(3), 4, torch.Generator().manual_seed(1))
    assert (responses == EOS).all() and response_mask(responses, EOS).sum(-1).eq(1).all()


def test_sampling_is_seeded_and_batched_greedy_matches_one_by_one():
    model, p = policy(1), prompts(6, 1)
    a = sample_responses(model, p, 5, torch.Generator().manual_seed(3))
    b = sample_responses(model, p, 5, torch.Generator().manual_seed(3))
    assert torch.equal(a, b)
    batched = greedy_responses(model, p)
    one_by_one = torch.cat([greedy_responses(model, p[i : i + 1]) for i in range(6)])
    assert torch.equal(batched, one_by_one)


def test_log_probs_are_causal_and_match_the_sampling_distribution():
    model, p = policy(2), prompts(4, 2)
    responses = sample_responses(model, p, 3, torch.Generator().manual_seed(0))
    log_probs = compute_log_probs(model, p, responses)
    assert log_probs.shape == responses.shape and (log_probs <= 0).all()
    # changing token t never changes the log-probs of the tokens before it
    changed = responses.clone()
    changed[..., 3] = (changed[..., 3] + 1) % (V + 1)
    after = compute_log_probs(model, p, changed)
    torch.testing.assert_close(after[..., :3], log_probs[..., :3])
    assert (after[..., 3] != log_probs[..., 3]).all()
    # the greedy response's tokens are the argmax of the next-token distribution
    greedy = greedy_responses(model, p)
    entropy = token_entropy(model, p, greedy)
    assert entropy.shape == greedy.shape and (entropy >= 0).all()
    greedy_log_probs = compute_log_probs(model, p, greedy)
    for token in range(V + 1):
        other = greedy.clone()
        other[..., 0] = token
        assert (compute_log_probs(model, p, other)[..., 0] <= greedy_log_probs[..., 0] + 1e-6).all()


def _policy_loss(model, p, responses, deltas, aggregation):
    log_probs = compute_log_probs(model, p, responses)
    per_token = compute_per_token_loss(log_probs, deltas, "clipped", log_probs.detach())
    return aggregate_loss(per_token, response_mask(responses, EOS), aggregation), log_probs


def test_tokens_after_eos_get_exactly_zero_gradient():
    model, p = policy(3), prompts(2, 3)
    responses = torch.tensor(
        [[[0, 1, EOS, EOS, EOS, EOS], [2, EOS, EOS, EOS, EOS, EOS]], [[1, 2, 3, EOS, EOS, EOS]] * 2]
    )
    garbage = responses.clone()  # same answers, other padding after the first EOS
    mask = response_mask(responses, EOS)
    garbage[mask == 0] = torch.tensor([3, 1, 4, 1, 5, 0, 2, 4, 1, 3, 1, 2, 3])[
        : int((mask == 0).sum())
    ]
    deltas = torch.tensor([[1.0, -1.0], [0.5, -0.5]])
    for aggregation in LOSS_AGGREGATIONS:
        loss, log_probs = _policy_loss(model, p, responses, deltas, aggregation)
        log_probs.retain_grad()
        model.zero_grad()
        loss.backward()
        assert (log_probs.grad[mask == 0] == 0).all(), aggregation  # exactly zero
        assert (log_probs.grad[mask == 1] != 0).all(), aggregation
        grads = [q.grad.clone() for q in model.parameters()]
        loss2, _ = _policy_loss(model, p, garbage, deltas, aggregation)
        model.zero_grad()
        loss2.backward()
        torch.testing.assert_close(loss2, loss, rtol=0, atol=1e-6)
        for q, g in zip(model.parameters(), grads):
            torch.testing.assert_close(q.grad, g, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("deltas_mode", ["centered_rewards", "normalized_rewards", "loo_rewards"])
def test_identical_responses_give_zero_policy_gradient(deltas_mode):
    model, p = policy(4), prompts(3, 4)
    one = sample_responses(model, p, 1, torch.Generator().manual_seed(5))
    responses = one.expand(3, 6, R).clone()  # G = 6 identical responses per prompt
    rewards = dedup_position_reward(p, responses, EOS)
    deltas = compute_deltas(rewards, deltas_mode)
    assert deltas.abs().max() < 1e-6
    for aggregation in LOSS_AGGREGATIONS:
        loss, _ = _policy_loss(model, p, responses, deltas, aggregation)
        model.zero_grad()
        loss.backward()
        biggest = max(q.grad.abs().max().item() for q in model.parameters())
        assert biggest < 1e-6, (aggregation, biggest)


def test_policy_validates_inputs():
    model = policy()
    with pytest.raises(ValueError, match="length 4"):
        sample_responses(model, make_prompts(2, 3, V, 0), 2)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        sample_responses(model, torch.full((2, P), V), 2)
    with pytest.raises(ValueError, match="num_samples"):
        sample_responses(model, prompts(2), 0)
    with pytest.raises(TypeError, match="autoregressive policy"):
        sample_responses(torch.nn.Linear(2, 2), prompts(2), 2)
    with pytest.raises(ValueError, match="divisible"):
        AutoregressiveSortPolicy(V, P, R, d_model=10, num_heads=4)


# ------------------------------------------------------------------ the sort-dedup task


def test_dedup_targets_and_rewards_hand_cases():
    p = torch.tensor([[3, 1, 3, 0], [2, 2, 2, 2]])
    targets, lengths = dedup_targets(p, EOS)
    assert targets.tolist() == [[0, 1, 3, EOS], [2, EOS, EOS, EOS]] and lengths.tolist() == [3, 1]
    responses = torch.tensor(
        [
            [[0, 1, 3, EOS, EOS], [0, 1, EOS, EOS, EOS], [0, 1, 3, 3, EOS], [0, 1, 3, 4, 5]],
            [[2, EOS, EOS, EOS, EOS], [2, 2, EOS, EOS, EOS], [EOS] * 5, [1, EOS, EOS, EOS, EOS]],
        ]
    )
    assert exact_dedup(p, responses, EOS).tolist() == [[True, False, False, False]] * 1 + [
        [True, False, False, False]
    ]
    expected = [[1.0, 2 / 3, 2 / 3, 1 / 3], [1.0, 0.0, 0.0, 0.0]]
    torch.testing.assert_close(dedup_position_reward(p, responses, EOS), torch.tensor(expected))
    assert dedup_exact_reward(p, responses, EOS).tolist() == [[1, 0, 0, 0], [1, 0, 0, 0]]
    reference = dedup_reference_responses(p, EOS, 5)
    assert exact_dedup(p, reference, EOS).all()


def test_position_reward_cannot_be_gamed_by_length():
    p = make_prompts(200, P, V, 7)
    reference = dedup_reference_responses(p, EOS, R)
    best = dedup_position_reward(p, reference, EOS)
    assert torch.equal(best, torch.ones_like(best))
    g = torch.Generator().manual_seed(0)
    for _ in range(20):  # random responses: reward 1 exactly when exact, else below 1
        responses = torch.randint(0, V + 1, (200, 8, R), generator=g)
        responses[:, :2] = reference  # make sure some are exact
        rewards = dedup_position_reward(p, responses, EOS)
        exact = exact_dedup(p, responses, EOS)
        assert torch.equal(rewards == 1, exact) and (rewards <= 1).all()
    # dropping the last answer token or adding one more token both lose reward
    targets, lengths = dedup_targets(p, EOS)
    shorter = reference.clone()
    shorter[torch.arange(200), 0, lengths - 1] = EOS
    longer = reference.clone()
    longer[torch.arange(200), 0, lengths] = 0
    assert (dedup_position_reward(p, shorter, EOS) < 1).all()
    assert (dedup_position_reward(p, longer, EOS) < 1).all()


def test_compute_dedup_reward_checks_its_inputs():
    p = prompts(2)
    responses = dedup_reference_responses(p, EOS, R)
    assert compute_dedup_reward(p, responses, "dedup_exact_reward", EOS).tolist() == [[1.0], [1.0]]
    with pytest.raises(ValueError, match="^unknown dedup reward function 'sort_distance_reward'"):
        compute_dedup_reward(p, responses, "sort_distance_reward", EOS)
    with pytest.raises(ValueError, match="below eos_token"):
        compute_dedup_reward(p, responses, "dedup_exact_reward", 3)
    with pytest.raises(ValueError, match="batch size"):
        compute_dedup_reward(p[:1], responses, "dedup_exact_reward", EOS)


# ------------------------------------------------------------------ the training loop


def ar_config(**overrides):
    from pgrl_helpers.config import TrainConfig

    settings = dict(
        model="autoregressive",
        task="sort_dedup",
        prompt_source="random",
        prompt_length=P,
        vocab_size=V,
        embedding_dim=32,
        reward_fn="dedup_position_reward",
        deltas_mode="normalized_rewards",
        loss_mode="clipped",
        num_responses=8,
        prompts_per_epoch=32,
        num_epochs=12,
        num_steps_per_epoch=4,
        learning_rate=3e-3,
        eval_every=12,
        num_eval_prompts=200,
        seed=0,
    )
    settings.update(overrides)
    return TrainConfig(**settings)


def test_training_loop_runs_the_autoregressive_policy_and_learns():
    from pgrl_helpers.training import run_policy_gradient

    # margin: held-out greedy mean reward rises by > 0.3 (max 1) in 12 epochs;
    # measured about -0.6 -> 0.4 (the untrained policy rambles and pays for extra tokens)
    history = run_policy_gradient(ar_config())
    evals = history.evals()
    gain = evals[-1]["validation_mean_reward"] - evals[0]["validation_mean_reward"]
    assert gain > 0.3, f"held-out mean reward rose by only {gain:.3f}"
    lengths = [r["response_length"] for r in history.steps()]
    assert all(1 <= x <= P + 2 for x in lengths)  # default max_response_length = P + 2
    assert history.run.model.max_response_length == P + 2


@pytest.mark.parametrize("aggregation", LOSS_AGGREGATIONS)
def test_training_loop_accepts_every_aggregation_kl_and_clip_higher(aggregation):
    from pgrl_helpers.training import run_policy_gradient

    config = ar_config(
        num_epochs=2,
        num_steps_per_epoch=2,
        eval_every=2,
        loss_aggregation=aggregation,
        kl_coef=0.05,
        epsilon_high=0.28,
        max_response_length=8,
    )
    history = run_policy_gradient(config)
    steps = history.steps()
    assert len(steps) == 4 and all(s["kl"] is not None and s["kl"] >= 0 for s in steps)
    assert steps[0]["kl"] == 0.0  # the reference is a copy of the policy at epoch 0, step 0


def test_fixed_length_models_keep_their_loss_under_every_aggregation():
    from pgrl_helpers.config import TrainConfig
    from pgrl_helpers.training import run_policy_gradient

    base = dict(num_epochs=2, num_steps_per_epoch=2, eval_every=2)
    reference = run_policy_gradient(TrainConfig(**base))
    for aggregation in LOSS_AGGREGATIONS:  # no padding: all three are the plain mean
        history = run_policy_gradient(TrainConfig(**base, loss_aggregation=aggregation))
        for a, b in zip(reference.steps(), history.steps()):
            assert a["loss"] == pytest.approx(b["loss"], rel=1e-5, abs=1e-7)
            assert a["response_length"] == 3.0


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(model="transformer"), "need model 'autoregressive'"),
        (dict(task="sort"), "only wired to those tasks"),
        (dict(loss_aggregation="sum"), "valid values are"),
        (dict(epsilon_high=0.0), "epsilon_high"),
        (dict(max_response_length=P), "max_response_length"),
        (dict(reward_fn="sort_distance_reward"), "dedup_position_reward"),
        (dict(task="sorted"), "valid values are"),
    ],
)
def test_bad_autoregressive_configs_are_named(overrides, message):
    with pytest.raises(ValueError, match=message):
        ar_config(**overrides).validate()


# ------------------------------------------------------------------ the KV cache


class _Uncached(AutoregressiveSortPolicy):
    """The same network, with ``forward`` overridden: generation then re-runs the prefix."""

    def forward(self, tokens):
        return super().forward(tokens)


def _uncached_copy(model):
    copy = _Uncached(V, P, R, d_model=16, num_layers=1, num_heads=2)
    copy.load_state_dict(model.state_dict())
    return copy


def test_kv_cache_logits_equal_the_full_forward_pass():
    from pgrl_helpers.autoregressive import KVCache

    model = AutoregressiveSortPolicy(V, P, R, d_model=16, num_layers=2, num_heads=2, seed=3)
    tokens = torch.randint(0, V + 1, (7, P + 1 + R), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        full = model(tokens)
        cache = KVCache(model)
        parts = [cache.forward(tokens[:, : P + 1])]  # the prompt and SEP at once
        parts += [cache.forward(tokens[:, t : t + 1]) for t in range(P + 1, tokens.shape[1])]
    torch.testing.assert_close(torch.cat(parts, dim=1), full, rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="longer than this policy's maximum"):
        cache.forward(tokens[:, :1])


@pytest.mark.parametrize("seed", range(4))
def test_kv_cache_gives_the_same_samples_for_the_same_seed(seed):
    model = policy(seed)
    plain = _uncached_copy(model)
    p = prompts(6, seed)
    cached = sample_responses(model, p, 8, torch.Generator().manual_seed(seed))
    uncached = sample_responses(plain, p, 8, torch.Generator().manual_seed(seed))
    assert torch.equal(cached, uncached)
    assert torch.equal(greedy_responses(model, p), greedy_responses(plain, p))


def test_a_cache_that_forgets_positions_changes_the_logits(monkeypatch):
    # planted bug: every new token gets position 0's embedding; the check above must see it
    from pgrl_helpers import autoregressive

    model = AutoregressiveSortPolicy(V, P, R, d_model=16, num_layers=1, num_heads=2, seed=1)
    tokens = torch.randint(0, V + 1, (3, P + 3), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(tokens)
        cache = autoregressive.KVCache(model)
        cache.forward(tokens[:, : P + 1])
        cache.length = 0  # the bug: positions restart
        wrong = cache.forward(tokens[:, P + 1 : P + 2])
    assert not torch.allclose(wrong[:, 0], full[:, P + 1], atol=1e-5)
