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
* ``ValueHead``: the cheaper alternative, a scalar head on the *policy's* trunk
  (trained through the combined objective ``ppo_combined_loss``).
* ``value_loss``: squared error to the GAE returns, optionally clipped (PPO2).
* ``GAEEstimator``: the loop's ``advantage_estimator="gae"``: owns the critic and its
  Adam optimizer, makes per-token deltas, and fits the critic in ``after_epoch``.

Shapes: prompts int[batch, prompt_pos]; responses, values, mask float[batch, trial, pos].
"""

from __future__ import annotations

import math

import torch
from einops import rearrange, repeat
from torch import nn

from ._validate import check_finite, check_ndim
from .autoregressive import AutoregressiveSortPolicy, _with_separator
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


def trunk_features(policy: AutoregressiveSortPolicy, tokens: torch.Tensor) -> torch.Tensor:
    """The policy's last hidden states (before the unembedding): float[batch, seq, d_model]."""
    x = policy.embedding(tokens) + policy.position[: tokens.shape[1]]
    for block in policy.blocks:
        x = block(x)
    return policy.final_norm(x)


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
        features = trunk_features(self.trunk, tokens)
        return _values_from(features, self.head, prompts.shape[0], self.prompt_length)


class ValueHead(nn.Module):
    """A scalar head on the policy's own trunk: V(s_t) with no second network.

    ``values(policy, prompts, responses)`` -> float[batch, trial, pos]; the gradient
    of a value loss flows into the policy's trunk, so it is trained with the policy
    through ``ppo_combined_loss`` (one optimizer over policy + head parameters).
    """

    def __init__(self, d_model: int, seed: int | None = None):
        super().__init__()
        with torch.random.fork_rng(enabled=seed is not None):
            if seed is not None:
                torch.manual_seed(seed)
            self.head = nn.Linear(d_model, 1)

    def values(self, policy, prompts: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
        features = trunk_features(policy, _response_inputs(policy, prompts, responses))
        return _values_from(features, self.head, prompts.shape[0], policy.prompt_length)


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
    if value_clip is not None and (
        isinstance(value_clip, bool)
        or not isinstance(value_clip, (int, float))
        or not math.isfinite(value_clip)
        or value_clip <= 0
    ):
        raise ValueError(f"value_clip must be a positive finite number or None, got {value_clip!r}")
    squared = (values - returns) ** 2
    if value_clip is not None:
        clipped = old_values + (values - old_values).clamp(-value_clip, value_clip)
        squared = torch.maximum(squared, (clipped - returns) ** 2)
    return 0.5 * masked_mean(squared, check_binary_mask(mask))  # holes (tool tokens) allowed


def ppo_combined_loss(
    policy_loss: torch.Tensor,
    critic_loss: torch.Tensor,
    value_coef: float = 0.5,
    entropy: torch.Tensor | None = None,
    entropy_coef: float = 0.0,
) -> torch.Tensor:
    """PPO's objective as a loss (Schulman et al. 2017, eq. 9, negated):

        L = L_policy + c1 * L_value - c2 * entropy

    for a value head sharing the policy's trunk (one optimizer). With a separate critic
    the two losses touch disjoint parameters, so each network takes its own steps and
    c1 only rescales the critic's gradient (Adam is nearly scale-invariant).
    """
    if not (isinstance(value_coef, (int, float)) and math.isfinite(value_coef) and value_coef >= 0):
        raise ValueError(f"value_coef must be >= 0 and finite, got {value_coef!r}")
    loss = policy_loss + value_coef * critic_loss
    if entropy is not None:
        loss = loss - entropy_coef * entropy
    return loss


def build_critic(config) -> AutoregressiveValueModel:
    """The separate critic for a config: the policy's trunk shape, seeded with config.seed."""
    return AutoregressiveValueModel(
        config.vocab_size,
        config.prompt_length,
        config.response_length,
        d_model=config.embedding_dim,
        num_layers=config.num_layers,
        num_heads=config.num_heads,
        seed=config.seed,
    )


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
