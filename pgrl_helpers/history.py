"""The run's history: a list of dict records, every metric defined once in ``METRICS``.

``run_policy_gradient`` returns a ``History``: one ``"step"`` record per optimizer step
and one ``"eval"`` record per evaluation. ``history_columns`` turns the records of one
kind into columns for plotting.
"""

from __future__ import annotations

import torch

#: Every metric the history records, defined once (name -> one-line description).
METRICS: dict[str, str] = {
    "kind": "'step' (one optimizer step) or 'eval' (a held-out evaluation)",
    "epoch": "step: index of the epoch (0-based); eval: number of epochs completed",
    "step": "step: index of the optimizer step (0-based, over the run); eval: steps done",
    "inner_step": "index of the step within its epoch, 0 .. num_steps_per_epoch - 1",
    "loss": "the minimised loss: policy loss + kl_penalty * KL - entropy_coef * entropy",
    "mean_reward": "mean reward of the epoch's sampled responses (all prompts, all G)",
    "kl": "KL(policy || reference) per response, by kl_estimator; None when kl_penalty is 0",
    "clip_fraction": "fraction of real tokens whose gradient the clipped loss cuts: ratio above "
    "1 + epsilon_high with delta > 0, or below 1 - epsilon with delta < 0 (0 unless 'clipped')",
    "frac_reward_zero_std": "fraction of prompt groups whose G rewards all tie (zero "
    "centred deltas: no gradient from that prompt); TRL's name",
    "entropy": "mean entropy (nats) of the policy over output positions of the epoch's prompts",
    "ratio_mean": "mean per-token ratio pi / pi_old against the policy that sampled the batch",
    "grad_norm": "L2 norm of the gradient of the loss over all parameters",
    "response_length": "mean tokens per sampled response, EOS included (fixed: prompt_length)",
    "responses_sampled": "number of responses sampled so far (epochs x prompts x G)",
    "heldout_exact_sort": "fraction of held-out prompts the greedy policy sorts exactly",
    "heldout_mean_reward": "mean reward of the greedy responses on the held-out prompts",
    "train_exact_sort": "fraction of the lecture's training prompts sorted greedily (else None)",
}

STEP_KEYS = (
    "kind",
    "epoch",
    "step",
    "inner_step",
    "loss",
    "mean_reward",
    "kl",
    "clip_fraction",
    "entropy",
    "ratio_mean",
    "grad_norm",
    "response_length",
    "frac_reward_zero_std",
)
EVAL_KEYS = (
    "kind",
    "epoch",
    "step",
    "responses_sampled",
    "heldout_exact_sort",
    "heldout_mean_reward",
    "train_exact_sort",
)


class History(list):
    """The run's records (a plain list of dicts) plus what a caller may want to inspect.

    Attributes: ``config``, ``model`` (the policy being trained), ``ref_model`` (the
    current frozen reference, or None), ``ref_refresh_epochs`` (epochs at which the
    reference was refreshed), ``heldout_prompts`` int[n, pos], ``train_prompts``
    (the lecture prompts, or the last random batch), ``stop_reason`` (None, 'callback'
    or 'target').
    """

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.model = None
        self.ref_model = None
        self.ref_refresh_epochs: list[int] = []
        self.heldout_prompts: torch.Tensor | None = None
        self.train_prompts: torch.Tensor | None = None
        self.stop_reason: str | None = None

    def steps(self) -> list[dict]:
        """The step records."""
        return [r for r in self if r["kind"] == "step"]

    def evals(self) -> list[dict]:
        """The eval records."""
        return [r for r in self if r["kind"] == "eval"]


def _check_choice(value, valid: tuple[str, ...], name: str) -> None:
    if value not in valid:
        raise ValueError(f"unknown {name} {value!r}; valid values are: {', '.join(valid)}")


def history_columns(history: list[dict], kind: str = "step") -> dict[str, list]:
    """Records of one kind ('step' or 'eval') as columns: {metric name: list of values}.

    Handy for plotting without pandas: ``cols = history_columns(h, "eval");
    plt.plot(cols["epoch"], cols["heldout_exact_sort"])``.
    """
    _check_choice(kind, ("step", "eval"), "record kind")
    records = [r for r in history if r.get("kind") == kind]
    keys = STEP_KEYS if kind == "step" else EVAL_KEYS
    return {key: [r.get(key) for r in records] for key in keys}
