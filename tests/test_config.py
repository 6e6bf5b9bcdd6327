"""TrainConfig (pgrl_helpers.config): every field's check names the field and its bound, the
bounds themselves and every recipe validate, the fields come in documented sections.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from dataclasses import replace

import pytest

from pgrl_helpers.advantages import DELTA_MODES
from pgrl_helpers.config import TrainConfig, config_fields


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"num_epochs": True}, "num_epochs must be a positive int"),
        ({"num_responses": 2.0}, "num_responses must be a positive int"),
        ({"learning_rate": float("nan")}, "learning_rate must be a positive finite"),
        ({"entropy_coef": float("inf")}, "entropy_coef must be a finite number >= 0"),
        ({"kl_coef": -0.1}, "kl_coef must be a finite number >= 0"),
        ({"kl_estimator": "k4"}, "unknown kl_estimator 'k4'"),
        ({"compute_ref_model_period": 0}, "compute_ref_model_period must be a positive int"),
        ({"prompt_length": 0}, "prompt_length must be a positive int"),
        ({"vocab_size": 10**6, "prompt_length": 4, "prompt_source": "random"}, "too large"),
        ({"prompt_source": "random", "prompts_per_epoch": 0}, "prompts_per_epoch must be a posi"),
        ({"embedding_dim": -1}, "embedding_dim must be a positive int"),
        ({"num_heads": 0}, "num_heads must be a positive int"),
        ({"eval_every": 0}, "eval_every must be a positive int"),
        ({"num_eval_prompts": True}, "num_eval_prompts must be a positive int or None"),
        ({"num_threads": 0}, "num_threads must be a positive int or None"),
        ({"target_validation_exact_sort": 0.0}, r"target_validation_exact_sort .* \(0, 1\] or"),
        ({"target_validation_exact_sort": 0.9, "epochs_after_target": -1}, "int >= 0"),
        ({"epochs_after_target": 3}, "set target_validation_exact_sort too"),
        ({"max_response_length": 3}, "max_response_length must be an int >= 4"),
        ({"mask_tool_tokens": 0}, "mask_tool_tokens must be True or False"),
        ({"reward_fn": 3}, "reward_fn must be a name or callable"),
        ({"task": "sort_dedup"}, "need model 'autoregressive'"),
        ({"loss_mode": "clipped", "epsilon": True}, "epsilon must be a positive finite"),
        ({"top_entropy_quantile": 1.5}, r"top_entropy_quantile must be a number in \(0, 1\]"),
        ({"clip_cov_ratio": 0.1}, "needs loss_mode 'clipped'"),
        ({"gamma": -0.1}, r"gamma must be a number in \[0, 1\]"),
        ({"rollout_source": "stale", "staleness": -1}, "staleness must be an int >= 0"),
    ],
)
def test_config_messages_name_the_field_and_the_bound(overrides, message, tiny_config):
    with pytest.raises((ValueError, TypeError), match=message):
        tiny_config("lecture", **overrides)  # validates


def test_every_recipe_and_the_bounds_themselves_validate(tiny_config):
    tiny_config("lecture", learning_rate=1e-12, entropy_coef=0.0, kl_coef=0.0)
    tiny_config("lecture", target_validation_exact_sort=1.0, epochs_after_target=0)
    tiny_config("lecture", num_threads=None, num_eval_prompts=None, compute_ref_model_period=1)
    for name in ("lecture", "grpo", "dapo", "gspo", "cispo", "rloo", "reinforce_pp"):
        TrainConfig.preset(name).validate()


def test_config_fields_come_in_sections():
    """TRL-style headers: every field sits under a '# --- section ---' comment."""
    import inspect

    lines = inspect.getsource(TrainConfig).splitlines()
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    sections, first_field = [], None
    for i, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith("# ---"):
            sections.append(stripped.strip("# -"))
        elif stripped.split(":", 1)[0] in names and first_field is None:
            first_field = i
            assert sections, "the first field comes before any section header"
    assert len(sections) >= 11
    assert sections[0].startswith("The lecture's run")


def test_every_config_field_has_a_docstring():
    docs = config_fields()
    names = [f.name for f in dataclasses.fields(TrainConfig)]
    assert sorted(docs) == sorted(names)
    assert all(len(doc) > 10 for doc in docs.values())


# --- the objectives' fields ---


def test_config_refuses_bad_objective_settings():
    """Each message names the field and its bound (not the whole sentence)."""
    from pgrl_helpers.recipes import RECIPES

    dedup = RECIPES["notebook_08"]  # a valid sort-dedup run: response_length 6
    for kwargs, match in [
        ({"dual_clip_c": 0.5}, "dual_clip_c must be .*> 1,"),
        ({"dual_clip_c": True}, "dual_clip_c must be .*> 1,"),
        ({"sapo_temperature_pos": -1.0}, "sapo_temperature_pos must be a positive"),
        ({"sapo_temperature_neg": math.nan}, "sapo_temperature_neg must be a positive"),
        ({"epsilon_high": 0.0}, "epsilon_high must be a positive .* or None"),
        ({"epsilon": math.inf}, "epsilon must be a positive finite"),
        ({"kl_cov_ratio": 1.5}, r"kl_cov_ratio must be a number in \(0, 1\]"),
        ({"kl_cov_coef": -1.0}, "kl_cov_coef must be .*>= 0"),
        (
            {"loss_mode": "kl_cov", "importance_sampling_level": "sequence"},
            "importance_sampling_level 'token'",
        ),
        (
            {"importance_sampling_level": "seq"},
            "unknown importance_sampling_level 'seq'; valid values are: token",
        ),
        ({"loss_aggregation": "sum"}, "unknown loss_aggregation 'sum'"),
        ({"batch_filter": "dapo"}, "batch_filter 'dapo' .* needs task 'sort_dedup'"),
        ({**dedup, "batch_filter": "dapo", "overlong_buffer": 0}, r"overlong_buffer .* \[1, 6\]"),
        ({**dedup, "batch_filter": "overlong_shaping", "overlong_buffer": 7}, r"\[1, 6\]"),
        ({**dedup, "batch_filter": "dapo", "overlong_buffer": 2.0}, "overlong_buffer must be an"),
        ({"overlong_penalty_factor": -1}, "overlong_penalty_factor must be .*>= 0"),
        ({"overlong_penalty_factor": math.inf}, "overlong_penalty_factor must be a finite"),
        ({"dynamic_sampling_max_draws": -1}, "dynamic_sampling_max_draws must be an int >= 0"),
        ({"dynamic_sampling_max_draws": 2}, "needs batch_filter 'dynamic_sampling' or 'dapo'"),
        (
            {**dedup, "batch_filter": "overlong_filtering", "loss_aggregation": "sequence_mean"},
            "overlong_filtering.*sequence_mean",
        ),
    ]:
        with pytest.raises(ValueError, match=match):
            TrainConfig(**kwargs).validate()
    for edge in (dict(dual_clip_c=1.0 + 1e-9, kl_cov_ratio=1.0, kl_cov_coef=0.0),
                 dict(dedup, batch_filter="dapo", overlong_buffer=6, overlong_penalty_factor=0),
                 dict(dedup, batch_filter="dapo", overlong_buffer=1, dynamic_sampling_max_draws=1)):  # fmt: skip
        TrainConfig(**edge).validate()  # the bounds themselves are allowed


# --- the remedies' fields (Clip-Cov, high-entropy mask, adaptive KL, two-sided caps) ---


BASE = dict(
    model="transformer", prompt_source="random", prompt_length=3, vocab_size=5,
    embedding_dim=8, num_layers=1, num_heads=2, prompts_per_epoch=6, num_responses=3,
    num_epochs=3, num_steps_per_epoch=2, loss_mode="clipped", eval_every=3, kl_coef=0.1,
    compute_ref_model_period=2,
)  # fmt: skip


def test_remedy_validation_names_the_field():
    config = TrainConfig(**BASE)
    for overrides, error, match in (
        (dict(clip_cov_ratio=1.5), ValueError, "^clip_cov_ratio must be a number in"),
        (dict(clip_cov_ratio=0.1, clip_cov_lb=5.0), ValueError, "^clip_cov_lb must be <"),
        (dict(clip_cov_lb=math.nan), ValueError, "^clip_cov_lb must be a number"),
        (dict(clip_cov_ratio=0.1, loss_mode="naive"), ValueError, "needs loss_mode 'clipped'"),
        (dict(top_entropy_quantile=0.0), ValueError, "^top_entropy_quantile must be"),
        (dict(kl_target=1.0, kl_coef=0.0), ValueError, "needs kl_coef > 0"),
        (dict(kl_target=-1.0), ValueError, "^kl_target must be a positive"),
        (dict(kl_target=1.0, kl_horizon=0), ValueError, "^kl_horizon must be a positive int"),
        (dict(kl_horizon=0), ValueError, "^kl_horizon must be a positive int"),
        (dict(correction_cap_low=0.5), ValueError, "set off_policy_correction to one of"),
        (dict(correction_cap_low=3.0), ValueError, r"^correction_cap_low must be .*\[0, "),
    ):
        with pytest.raises(error, match=match):
            replace(config, **overrides).validate()


@pytest.mark.parametrize(
    "mode", ["centered_rewards", "batch_normalized_rewards", "reinforce_pp_baseline"]
)
def test_one_response_per_prompt_with_a_vanishing_baseline_is_refused(mode, tiny_config):
    # G = 1: the group mean is the response's own reward, every delta 0, no gradient
    with pytest.raises(ValueError, match=r"^num_responses \(G\) = 1 with deltas_mode"):
        tiny_config("lecture", deltas_mode=mode, num_responses=1)
    tiny_config("lecture", deltas_mode=mode, num_responses=2)


def test_the_default_config_with_one_response_is_refused_and_raw_rewards_are_not(tiny_config):
    with pytest.raises(ValueError, match=r"every delta is 0 .* Pick num_responses \(G\) >= 2"):
        TrainConfig(num_responses=1).validate()  # the default deltas_mode: centered_rewards
    for mode in ("rewards", "max_rewards"):  # delta = r: G = 1 trains (plain REINFORCE)
        tiny_config("lecture", deltas_mode=mode, num_responses=1)


@pytest.mark.parametrize("mode", [m for m in DELTA_MODES if m != TrainConfig().deltas_mode])
def test_a_deltas_mode_that_gae_would_ignore_is_refused(mode, tiny_config):
    """'gae' takes its deltas from the critic, so deltas_mode is not read: any value but the
    default is refused (the default passes: a dataclass cannot tell it from an explicit one)."""
    default = TrainConfig().deltas_mode
    assert default == "centered_rewards"
    ignored = (
        rf"^deltas_mode {mode!r} would be ignored: advantage_estimator 'gae' .*default {default!r}"
    )
    with pytest.raises(ValueError, match=ignored):
        tiny_config("autoregressive", advantage_estimator="gae", deltas_mode=mode)
    tiny_config("autoregressive", advantage_estimator="gae", deltas_mode=default)
    if mode != "max_rewards":  # 'group' reads it (max_rewards: refused with this task's reward)
        tiny_config("autoregressive", advantage_estimator="group", deltas_mode=mode)


# --- the loss options: one source of defaults ---


def test_the_loss_fields_take_their_defaults_from_loss_options():
    """TrainConfig declares every LossOptions field with LossOptions' default (one source)."""
    from pgrl_helpers.losses import LossOptions

    config = TrainConfig()
    for field in dataclasses.fields(LossOptions):
        assert getattr(config, field.name) == field.default, field.name
    source = inspect.getsource(TrainConfig)
    for field in dataclasses.fields(LossOptions):
        assert f"{field.name}: " in source and f"= _LOSS_DEFAULTS.{field.name}\n" in source


def test_loss_options_copies_every_loss_field_of_the_config():
    from pgrl_helpers.losses import LossOptions, loss_options

    changed = dict(
        epsilon=0.1, epsilon_high=0.3, dual_clip_c=2.5, sapo_temperature_pos=0.7,
        sapo_temperature_neg=1.3, kl_cov_ratio=0.01, kl_cov_coef=0.5,
    )  # fmt: skip
    names = {f.name for f in dataclasses.fields(LossOptions)} - {"importance_sampling_level"}
    assert set(changed) == names, "a new LossOptions field: add it here"
    for level in ("token", "sequence"):
        config = TrainConfig(**changed, importance_sampling_level=level)
        assert loss_options(config) == LossOptions(**changed, importance_sampling_level=level)
    # the level is the config's own (one source for token / sequence; no override)
    assert loss_options(TrainConfig()).importance_sampling_level == "token"


#: Values of the wrong type for each kind of field (a bool is not an int: True is not a seed).
WRONG_TYPES = {
    bool: (0, 1, "False", None, 1.0),
    int: (True, 2.5, "3", None),
    float: (True, "0.1", None),
    str: (3, True, None, b"token"),
}


def _wrong_values(annotation) -> list:
    """The wrong-type values for a field annotated ``annotation`` (None allowed if Optional)."""
    import typing

    args = typing.get_args(annotation) or (annotation,)
    kinds = [kind for kind in (bool, int, float, str) if kind in args]
    values = [value for kind in kinds[:1] for value in WRONG_TYPES[kind]]
    if type(None) in args:
        values = [value for value in values if value is not None]
    if any(arg not in (bool, int, float, str, type(None)) for arg in args):  # str | Callable
        values = [value for value in values if not callable(value) and not isinstance(value, str)]
    if float in args and int not in args:  # an int is a float here (learning_rate=1)
        values = [
            value for value in values if isinstance(value, bool) or not isinstance(value, int)
        ]
    return values


def test_every_field_refuses_a_value_of_the_wrong_type():
    """Walk every TrainConfig field: each wrong-type value is refused by validate() (issue 50:
    detach_old_log_probs=0 silently planted the freeze pitfall, seed=True was a seed)."""
    import typing

    hints = typing.get_type_hints(TrainConfig)
    walked = set()
    for field in dataclasses.fields(TrainConfig):
        values = _wrong_values(hints[field.name])
        assert values, f"{field.name}: no wrong-type value for {hints[field.name]}"
        for value in values:
            with pytest.raises((TypeError, ValueError), match=field.name):
                TrainConfig(**{field.name: value}).validate()
        walked.add(field.name)
    assert walked == {f.name for f in dataclasses.fields(TrainConfig)}
