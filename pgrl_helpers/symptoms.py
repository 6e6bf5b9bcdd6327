"""The catalogue of GRPO symptoms that ``diagnose`` recognises (notebook 13).

For each finding name: the symptom, its likely causes, what to try, and the metric to watch,
ours first and, after the slash, the name Hugging Face TRL's ``GRPOTrainer`` logs it under
(checked against ``trl/trainer/grpo_trainer.py``; ``grad_norm`` comes from the
``transformers`` Trainer). ``diagnose.Finding`` takes its texts from here, so the findings
and the summary table never disagree.
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
        "mean_reward, heldout_exact_sort / TRL reward",
    ),
    "reward_hacking": (
        "reward up while held-out exact-sort is flat or down",
        "the reward pays for something other than the goal (a loophole: any ascending run "
        "scores), or the policy memorises its training prompts",
        "close the loophole (a reward that is maximal only at the goal, e.g. "
        "sort_distance_reward); train on fresh prompts; always log a true metric",
        "heldout_exact_sort next to heldout_mean_reward / TRL rewards/<fn>/mean per reward",
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
        "kl_penalty (beta) too small for the learning rate, reference never refreshed, "
        "learning rate too high",
        "larger beta, lower learning_rate, refresh the reference (compute_ref_model_period)",
        "kl / TRL kl",
    ),
    "clip_high": (
        "clip fraction near 1: most tokens' gradients are cut off",
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
