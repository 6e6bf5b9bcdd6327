"""The default-off remedies in the loop: the defaults change no number, each option changes a
run (kept apart from the remedies' fast unit tests in tests/test_covariance.py, test_masking.py,
test_kl.py and test_offpolicy.py, which the mutation run uses)."""

from __future__ import annotations

from test_config import BASE

from pgrl_helpers.config import TrainConfig
from pgrl_helpers.training import run_policy_gradient


def _losses(**overrides):
    history = run_policy_gradient(TrainConfig(**(BASE | overrides)))
    return [r["loss"] for r in history if r["kind"] == "step"]


def test_each_remedy_changes_the_run_and_the_defaults_do_not():
    plain = _losses()
    assert plain == _losses(clip_cov_ratio=0.0, top_entropy_quantile=1.0, kl_target=None)
    for option in (
        dict(clip_cov_ratio=0.5, clip_cov_lb=-10.0, clip_cov_ub=10.0),
        dict(top_entropy_quantile=0.3),
        dict(kl_target=1e-4, kl_horizon=3),
    ):
        assert _losses(**option) != plain, option


def test_two_sided_mask_in_the_loop():
    stale = dict(
        BASE, rollout_source="stale", staleness=1, off_policy_correction="mis",
        sampler_temperature=1.5, correction_cap=1.5,
    )  # fmt: skip
    one = run_policy_gradient(TrainConfig(**stale))
    two = run_policy_gradient(TrainConfig(**stale, correction_cap_low=0.8))
    assert [r["loss"] for r in one if r["kind"] == "step"] != [
        r["loss"] for r in two if r["kind"] == "step"
    ]
