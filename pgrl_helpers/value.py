"""PPO's value model (critic), its loss, and the ``"gae"`` advantage estimator.

PPO (Schulman et al. 2017, arXiv:1707.06347) as used for language models (Ouyang et al.
2022, arXiv:2203.02155; Stiennon et al. 2020) trains a second network, the *critic*,
to predict V(s_t), the expected return from the state s_t = prompt + response[:t], at
every response position; GAE (``pgrl_helpers.gae``) turns its predictions and the
rewards into per-token advantages. GRPO (Shao et al. 2024, arXiv:2402.03300) drops the
critic and uses the group mean instead.

* ``AutoregressiveValueModel``: a separate critic of the policy's shape (the
  ``AutoregressiveSortPolicy`` trunk with a scalar head instead of the unembedding).
  This copy is what the memory argument is about (``pgrl_helpers.memory``).
* ``value_loss``: squared error to the GAE returns, optionally clipped (PPO2).
* ``GAEEstimator``: the loop's ``advantage_estimator="gae"``: owns the critic and its
  Adam optimizer, makes per-token deltas, and fits the critic in ``after_epoch``.

Shapes: prompts int[batch, prompt_pos]; responses, values, mask float[batch, trial, pos].

Taught in notebook 10.
"""

from __future__ import annotations

import torch
from einops import rearrange, repeat
from torch import nn

from ._validate import check_bool, check_finite, check_ndim, check_number
from .autoregressive import AutoregressiveSortPolicy, _with_separator, autoregressive_arguments
from .gae import check_binary_mask, compute_gae, outcome_token_rewards, whiten
from .kl import kl_k1
from .masking import masked_mean


def _response_inputs(model, prompts: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
    """[(batch trial), prompt_pos + pos]: prompt, SEP, response[:-1] (teacher forcing)."""
    check_ndim(responses, 3, "responses", "batch, trial, pos")
    trial = responses.shape[1]
    context = repeat(_with_separator(model, prompts), "batch pos -> (batch trial) pos", trial=trial)
    flat = rearrange(responses.long(), "batch trial pos -> (batch trial) pos")
    return torch.cat([context, flat[:, :-1]], dim=1)


def _values_from(features: torch.Tensor, head: nn.Linear, batch: int, prompt_length: int):
    """Hidden states at SEP and after -> V(s_t) float[batch, trial, pos]."""
    values = head(features[:, prompt_length:]).squeeze(-1)  # [(batch trial), pos]
    return rearrange(values, "(batch trial) pos -> batch trial pos", batch=batch)


class AutoregressiveValueModel(nn.Module):
    """A separate critic: the autoregressive policy's trunk with a scalar value head.

    ``values(prompts, responses)`` -> V(s_t) float[batch, trial, pos], where V at slot t
    reads prompt + SEP + response[:t] (the same causal context as the policy's
    log-prob of token t). Same trunk shape as ``AutoregressiveSortPolicy`` (same
    arguments); the head ``Linear(d_model, 1)`` replaces the unembedding.
    """

    def __init__(
        self,
        vocab_size: int,
        prompt_length: int,
        max_response_length: int,
        d_model: int = 64,
        num_layers: int = 2,
        num_heads: int = 4,
        seed: int | None = None,
    ):
        super().__init__()
        trunk = AutoregressiveSortPolicy(
            vocab_size, prompt_length, max_response_length, d_model, num_layers, num_heads, seed
        )
        del trunk.unembed  # the critic never predicts tokens
        self.trunk = trunk
        self.prompt_length = prompt_length
        with torch.random.fork_rng(enabled=seed is not None):
            if seed is not None:
                torch.manual_seed(seed + 1)
            self.head = nn.Linear(d_model, 1)

    def values(self, prompts: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
        """V(s_t) at every response slot, float[batch, trial, pos] (mask the padding)."""
        tokens = _response_inputs(self.trunk, prompts, responses)
        features = self.trunk.features(tokens)
        return _values_from(features, self.head, prompts.shape[0], self.prompt_length)


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    value_clip: float | None = None,
) -> torch.Tensor:
    """PPO's value loss, mean over the masked (policy) tokens: 0.5 * (V - R)^2, optionally clipped.

    values (differentiable), old_values (the critic's predictions when the batch was
    sampled), returns (GAE targets), mask: float[batch, trial, pos]. With ``value_clip``
    c (PPO2, OpenAI baselines; TRL's ``cliprange_value``) the prediction may move at most
    c from old_values before the loss stops rewarding the move:

        V_clip = old_V + clip(V - old_V, -c, c),  loss = 0.5 * max((V - R)^2, (V_clip - R)^2)

    (the max makes it pessimistic, like the clipped policy loss). None: no clipping.
    """
    for tensor, name in ((values, "values"), (old_values, "old_values"), (returns, "returns")):
        check_ndim(tensor, 3, name, "batch, trial, pos")
        if tensor.shape != mask.shape:
            raise ValueError(
                f"{name} and mask must have the same shape, got {list(tensor.shape)} and "
                f"{list(mask.shape)}"
            )
        check_finite(tensor.detach(), name)
    check_number(value_clip, "value_clip", 0, allow_none=True)
    squared = (values - returns) ** 2
    if value_clip is not None:
        clipped = old_values + (values - old_values).clamp(-value_clip, value_clip)
        squared = torch.maximum(squared, (clipped - returns) ** 2)
    return 0.5 * masked_mean(squared, check_binary_mask(mask))  # holes (tool tokens) allowed


def check_value_fields(config) -> None:
    """Raise naming the first bad PPO / value-model field of a ``TrainConfig``.

    gamma and gae_lambda in [0, 1]; critic_learning_rate and value_clip positive or None;
    whiten_advantages and kl_in_reward True or False; advantage_estimator 'gae' needs the
    autoregressive policy (the critic is its trunk), and kl_in_reward needs 'gae' and
    kl_coef > 0 (the KL goes into per-token rewards). (What 'gae' and kl_in_reward leave
    unread, deltas_mode and kl_estimator, is refused by ``TrainConfig.validate``.)
    """
    check_number(config.gamma, "gamma", 0, 1, low_inclusive=True)
    check_number(config.gae_lambda, "gae_lambda", 0, 1, low_inclusive=True)
    check_number(config.critic_learning_rate, "critic_learning_rate", 0, allow_none=True)
    check_number(config.value_clip, "value_clip", 0, allow_none=True)
    check_bool(config.whiten_advantages, "whiten_advantages")
    check_bool(config.kl_in_reward, "kl_in_reward")
    if config.advantage_estimator == "gae" and config.model != "autoregressive":
        raise ValueError(
            "advantage_estimator 'gae' needs model 'autoregressive' (its critic is the "
            f"autoregressive trunk with a value head), got model {config.model!r}"
        )
    if config.kl_in_reward and (config.advantage_estimator != "gae" or config.kl_coef <= 0):
        raise ValueError(
            "kl_in_reward puts -kl_coef x k1 into per-token rewards: it needs "
            "advantage_estimator 'gae' (per-token advantages) and kl_coef > 0, got "
            f"{config.advantage_estimator!r} and {config.kl_coef!r}"
        )


def build_critic(config) -> AutoregressiveValueModel:
    """The separate critic for a config: the policy's trunk shape, seeded with config.seed.

    Taught in notebook 10.
    """
    return AutoregressiveValueModel(**autoregressive_arguments(config))


class GAEEstimator:
    """``advantage_estimator="gae"``: PPO's critic + GAE, per-token deltas.

    Built once per run as ``GAEEstimator(policy, config)``. Per epoch the loop calls
    ``estimator(rollout, config)`` (after the old / reference log-probs are frozen) for
    the deltas float[batch, trial, pos], then ``after_epoch(rollout)``, which takes
    ``config.num_steps_per_epoch`` Adam steps of ``value_loss`` on the critic.

    Per-token rewards: the outcome reward on the last real token; with
    ``config.kl_in_reward`` also -beta * k1_t = -beta * (log pi_old - log pi_ref) on every
    real token (the PPO-RLHF recipe, Ouyang et al. 2022) instead of a KL term in the loss.
    ``value_losses`` logs the critic's mean loss per epoch; ``advantage_variances`` the
    variance of the raw GAE advantages (before whitening) over the epoch's real tokens.
    """

    def __init__(self, policy, config):
        self.critic = build_critic(config)
        lr = config.critic_learning_rate or config.learning_rate
        self.optimizer = torch.optim.Adam(self.critic.parameters(), lr=lr)
        self.config = config
        self.value_losses: list[float] = []
        self.advantage_variances: list[float] = []
        self._targets = None

    def token_rewards(self, rollout, config) -> torch.Tensor:
        """float[batch, trial, pos]: outcome on the last real token (- beta * k1 per token)."""
        rewards = outcome_token_rewards(rollout.rewards, rollout.mask)
        if config.kl_in_reward:
            k1 = kl_k1(rollout.old_log_probs, rollout.ref_log_probs)
            rewards = rewards - config.kl_coef * k1 * rollout.mask
        return rewards

    def __call__(self, rollout, config) -> torch.Tensor:
        with torch.no_grad():
            old_values = self.critic.values(rollout.prompts, rollout.responses)
        rewards = self.token_rewards(rollout, config)
        advantages, returns = compute_gae(
            rewards, old_values, rollout.mask, config.gamma, config.gae_lambda
        )
        self._targets = (rollout, old_values * rollout.mask, returns)
        real = advantages[rollout.mask > 0]
        self.advantage_variances.append(float(real.var(correction=0)) if real.numel() else 0.0)
        if config.whiten_advantages:
            return whiten(advantages, rollout.mask)
        return advantages

    def after_epoch(self, rollout) -> None:
        """Fit the critic to this epoch's GAE returns (num_steps_per_epoch Adam steps)."""
        if self._targets is None:
            raise ValueError("after_epoch called before the estimator made this epoch's deltas")
        stored, old_values, returns = self._targets
        if stored is not rollout:
            raise ValueError("after_epoch got a different rollout than the deltas were made for")
        losses = []
        for _ in range(self.config.num_steps_per_epoch):
            values = self.critic.values(rollout.prompts, rollout.responses)
            loss = value_loss(values, old_values, returns, rollout.mask, self.config.value_clip)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            losses.append(loss.item())
        self.value_losses.append(sum(losses) / len(losses))
