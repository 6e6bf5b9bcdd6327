"""The catalogue of GRPO symptoms that ``diagnose`` recognises (notebook 13).

For each finding name: the symptom, its likely causes, what to try, and the metric to watch,
ours first and, after the slash, the name Hugging Face TRL's ``GRPOTrainer`` logs it under
(checked against ``trl/trainer/grpo_trainer.py``; ``grad_norm`` comes from the
``transformers`` Trainer). ``diagnose.Finding`` takes its texts from here, so the findings
and the summary table never disagree.

Taught in notebook 13.
"""

from __future__ import annotations

#: name -> (symptom, likely causes, what to try, metric to watch: ours / TRL's name).
CATALOGUE: dict[str, tuple[str, str, str, str]] = {
    "frozen_ratio": (
        "ratio exactly 1 and zero gradient at every step: the policy never moves",
        "old log-probs computed with gradients from the current policy (missing "
        "torch.no_grad() / .detach(); detach_old_log_probs=False), so ratio = exp(0) and "
        "d ratio = 0",
        "compute old_log_probs once per batch under torch.no_grad() before the inner steps",
        "grad_norm, ratio_mean / TRL grad_norm, clip_ratio/region_mean",
    ),
    "tied_groups": (
        "flat reward with all-tied groups: every response of a group scores the same, so "
        "every delta is 0",
        "reward too sparse for the current policy (0/1 reward, nothing correct yet), G too "
        "small, prompts too hard, or a policy that samples one response",
        "partial-credit reward, larger G, easier prompts first; drop tied groups (DAPO "
        "dynamic sampling)",
        "frac_reward_zero_std / TRL frac_reward_zero_std, reward_std",
    ),
    "loss_near_zero": (
        "loss near 0 while the reward moves (normal)",
        "centred deltas average to 0 in every group, and the ratio is ~1 on fresh samples: "
        "the loss value is not a progress measure (the gradient is not 0)",
        "nothing: watch the reward and held-out metrics instead of the loss",
        "mean_reward, validation_exact_sort / TRL reward",
    ),
    "reward_hacking": (
        "reward up while held-out exact-sort is flat or down",
        "the reward pays for something other than the goal (a loophole: any ascending run "
        "scores), or the policy memorises its training prompts",
        "close the loophole (a reward that is maximal only at the goal, e.g. "
        "sort_distance_reward); train on fresh prompts; always log a true metric",
        "validation_exact_sort next to validation_mean_reward / TRL rewards/<fn>/mean per reward",
    ),
    "plateau": (
        "the reward stopped improving and the goal was never reached: the run is stuck",
        "a policy that cannot explore (near-deterministic start, entropy collapse), a reward "
        "whose easy part is learned while the rest gives no signal, a model that cannot "
        "represent the task, a learning rate too small",
        "check the other findings for the cause; raise the start's entropy (smaller initial "
        "logits), a partial-credit reward, centred or normalised deltas, a larger model",
        "mean_reward next to validation_exact_sort / TRL reward and an accuracy reward",
    ),
    "entropy_collapse": (
        "entropy collapsed before the task was solved: the policy stopped exploring",
        "learning rate too high, too many steps per batch, no entropy control",
        "lower learning_rate, fewer inner steps, entropy bonus (entropy_coef), clip-higher "
        "(epsilon_high)",
        "entropy / TRL entropy",
    ),
    "kl_blowup": (
        "KL to the reference blew up: the policy ran far from the reference",
        "kl_coef (beta) too small for the learning rate, reference never refreshed, "
        "learning rate too high",
        "larger beta, lower learning_rate, refresh the reference (compute_ref_model_period)",
        "kl / TRL kl",
    ),
    "held_at_reference": (
        "the policy stays at its reference: gradients flow and the KL term is on, but the KL "
        "stays near 0 and entropy barely leaves its start while the goal is not reached",
        "kl_coef (beta) too strong: the KL penalty pulls every update back to the reference "
        "(a reference refreshed every few epochs moves too little to help); less often, a "
        "learning rate too small to leave the reference at all",
        "lower kl_coef (DeepSeekMath's GRPO used 0.04; DAPO and Dr. GRPO drop the term, 0), "
        "or refresh the reference more often; then watch entropy fall and held-out rise",
        "kl, entropy / TRL kl, entropy",
    ),
    "clip_high": (
        "clip fraction above 0.3 (CLIP_HIGH): many tokens' gradients are cut off",
        "epsilon too small (the lecture's 0.01), learning rate too high or too many steps "
        "per batch",
        "epsilon 0.2 (PPO/GRPO default), lower learning_rate or fewer inner steps",
        "clip_fraction / TRL clip_ratio/region_mean",
    ),
    "clip_zero": (
        "clip fraction pinned at 0 although batches are reused: the steps never reach the "
        "clip range",
        "learning rate too small (or epsilon too large): the policy barely moves per batch",
        "raise learning_rate; check the reward rises",
        "clip_fraction, ratio_mean / TRL clip_ratio/region_mean",
    ),
    "length_drift": (
        "response length drifted without the task getting solved",
        "a loss aggregation with a length bias (sequence_mean: long wrong answers are "
        "penalised less per token), or a reward that pays for length",
        "token_mean (DAPO) or constant_normalizer (Dr. GRPO); overlong shaping",
        "response_length / TRL completions/mean_length, completions/clipped_ratio",
    ),
    "grad_spike": (
        "exploding gradient norm: spikes far above the run's median",
        "reward outliers with unscaled deltas (raw or centred rewards), an unclipped ratio "
        "over many steps per batch, learning rate too high",
        "normalize deltas by the group std (or clip rewards), clipped loss, lower "
        "learning_rate, gradient clipping",
        "grad_norm / TRL grad_norm",
    ),
}


def catalogue_table() -> str:
    """Markdown table: symptom -> likely cause -> fix -> metric to watch (ours / TRL)."""
    rows = ["| finding | symptom | likely cause | fix | metric to watch (ours / TRL) |"]
    rows.append("|---|---|---|---|---|")
    for name, (symptom, causes, fixes, watch) in CATALOGUE.items():
        rows.append(f"| `{name}` | {symptom} | {causes} | {fixes} | {watch} |")
    return "\n".join(rows)


# --------------------------------------------------------------------------------------
# Planted causes: one small run per finding (notebook 13, benchmarks/bench_detectors.py)
# --------------------------------------------------------------------------------------


def exact_sort_reward(prompts, responses):
    """1 for the exactly sorted response, else 0: float[batch, trial] (a sparse reward)."""
    from .sort_task import exact_sort

    return exact_sort(prompts, responses).float()


exact_sort_reward.vectorized = True


def flaky_reward(prompts, responses):
    """``sort_distance_reward``, except about 1 response in 300 scores 1000 (a reward server
    returning an error code as a number): float[batch, trial]. Needs prompt length 4.

    Over uniformly drawn length-4 prompts and responses (values 0-5) 1 in 316 is an outlier
    (``tests/test_symptoms.py``); a training policy's replies are not uniform, so a run sees
    its own rate."""
    import torch

    from .sort_task import sort_distance_reward_batch

    rewards = sort_distance_reward_batch(prompts, responses)
    weights = torch.tensor([7, 31, 131, 521])
    code = (responses.long() * weights).sum(-1) + (prompts.long() * weights.flip(0)).sum(-1)[
        :, None
    ]
    return torch.where(code % 997 == 0, torch.full_like(rewards, 1000.0), rewards)


flaky_reward.vectorized = True


def wrong_answer_penalty(prompts, responses, eos):
    """0 for the exact answer of the sort-dedup task, -1 for anything else, whatever its
    length: float[batch, trial] (a reward with no preferred length)."""
    from .dedup_task import dedup_exact_reward

    return dedup_exact_reward(prompts, responses, eos) - 1.0


#: Epochs of the short runs (the reward-hacking runs train twice as long).
EPOCHS = 20


def healthy_config(seed: int = 0):
    """The healthy run every planted cause changes one thing of: a 2-layer SortTransformer on
    random length-4 prompts, values 0-5, G 8, 32 prompts x 2 steps per epoch, 20 epochs."""
    from .config import TrainConfig

    return TrainConfig(
        model="transformer", prompt_source="random", prompt_length=4, vocab_size=6,
        embedding_dim=32, num_layers=2, num_heads=4, prompts_per_epoch=32, num_responses=8,
        num_epochs=EPOCHS, num_steps_per_epoch=2, learning_rate=3e-3, eval_every=5,
        num_eval_prompts=30, reward_fn="sort_distance_reward", loss_mode="clipped",
        deltas_mode="centered_rewards", seed=seed,
    )  # fmt: skip


def _length_probe(seed: int, aggregation: str):
    from .config import TrainConfig

    return TrainConfig(
        model="autoregressive", task="sort_dedup", prompt_source="random", prompt_length=4,
        vocab_size=6, max_response_length=10, embedding_dim=32, num_layers=2, num_heads=4,
        reward_fn=wrong_answer_penalty, deltas_mode="rewards", loss_mode="clipped",
        entropy_coef=0.05, num_responses=8, prompts_per_epoch=16, num_epochs=8,
        num_steps_per_epoch=2, learning_rate=3e-3, eval_every=4, num_eval_prompts=10,
        loss_aggregation=aggregation, seed=seed,
    )  # fmt: skip


def planted_run(name: str, seed: int = 0):
    """(planted config, fixed config) for finding ``name``: the planted cause and the fix,
    both at ``seed``. For 'loss_near_zero' (an info note) the 'planted' run is the healthy
    run (centred deltas) and the control has raw rewards and the naive loss. For 'plateau'
    the planted run is the lecture's setup with raw rewards (notebook 07: stuck at about 3 of
    5 with nothing sorted) and the control is the healthy run."""
    from dataclasses import replace as R

    from .config import TrainConfig

    if name not in PLANTED:
        raise ValueError(f"name must be one of {sorted(PLANTED)}, got {name!r}")
    h = healthy_config(seed)
    hard = R(h, prompt_length=6, vocab_size=10, num_eval_prompts=100)
    long = R(h, num_epochs=2 * EPOCHS)
    pairs = {
        "loss_near_zero": (h, R(h, deltas_mode="rewards", loss_mode="naive")),
        "frozen_ratio": (R(h, detach_old_log_probs=False), h),
        "tied_groups": (R(hard, reward_fn=exact_sort_reward), hard),
        "reward_hacking": (R(long, reward_fn="sort_inclusion_ordering_reward"), long),
        "entropy_collapse": (R(h, learning_rate=1e-1), h),
        "kl_blowup": (
            R(h, kl_coef=0.01, compute_ref_model_period=1000),
            R(h, kl_coef=0.1, compute_ref_model_period=1000),
        ),
        "held_at_reference": (R(h, kl_coef=1.0), R(h, kl_coef=0.1)),
        "clip_high": (R(h, epsilon=0.01), h),
        "clip_zero": (R(h, learning_rate=1e-4), h),
        "length_drift": (_length_probe(seed, "sequence_mean"), _length_probe(seed, "token_mean")),
        "grad_spike": (
            R(h, reward_fn=flaky_reward),
            R(h, reward_fn=flaky_reward, deltas_mode="normalized_rewards"),
        ),
        "plateau": (TrainConfig(num_epochs=30, deltas_mode="rewards", seed=seed), h),
    }
    return pairs[name]


#: The planted cause of each finding, in words (``planted_run`` builds the configs).
PLANTED: dict[str, str] = {
    "loss_near_zero": "the healthy run itself (centred deltas); control: raw rewards, naive loss",
    "frozen_ratio": "old log-probs computed with gradients (detach_old_log_probs=False)",
    "tied_groups": "0/1 exact-sort reward on length-6 prompts, values 0-9",
    "reward_hacking": "the lecture's inclusion+ordering reward (a loophole), 40 epochs",
    "entropy_collapse": "learning rate 1e-1 (30x the healthy 3e-3): a blow-up, not a drift",
    "kl_blowup": "beta 0.01 with a reference never refreshed",
    "held_at_reference": "beta 1.0 (fix: 0.1), the reference refreshed every 10 epochs",
    "clip_high": "epsilon 0.01 (the lecture's hard-coded value)",
    "clip_zero": "learning rate 1e-4 (30x too small)",
    "length_drift": "autoregressive policy, penalty-only reward, per-sequence loss mean",
    "grad_spike": "a reward outlier (1 response in ~300 scores 1000), centred deltas",
    "plateau": "the lecture's setup with raw rewards as deltas, 30 epochs",
}
