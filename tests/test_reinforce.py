"""The hand-written REINFORCE loop of notebook 02 (pgrl_helpers.reinforce)."""

from __future__ import annotations

import pytest
import torch

from pgrl_helpers.models import LectureModel
from pgrl_helpers.reinforce import plain_reinforce


def test_plain_reinforce_improves_a_zero_one_reward():
    def zero_one(prompts, responses):
        target = torch.sort(prompts, dim=-1).values[:, None, :]
        return (responses == target).all(-1).float()

    zero_one.vectorized = True
    model = LectureModel(3, embedding_dim=4, prompt_length=3, response_length=3, seed=1)
    history = plain_reinforce(
        model, torch.tensor([[1, 0, 2]]), zero_one, 30, 32, 0.3, torch.Generator().manual_seed(0)
    )
    assert len(history["p_correct"]) == 30
    assert history["p_correct"][-1] > history["p_correct"][0]
    with pytest.raises(ValueError, match="num_steps"):
        plain_reinforce(model, torch.tensor([[1, 0, 2]]), zero_one, 0, 32, 0.3, torch.Generator())
