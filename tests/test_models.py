"""LectureModel (pgrl_helpers.models): logits shape, seeding without touching the global RNG,
bad input.
"""

from __future__ import annotations

import pytest
import torch

from pgrl_helpers.models import LectureModel
from pgrl_helpers.sampling import (
    compute_log_probs,
    sample_responses,
)
from pgrl_helpers.sort_task import lecture_prompts


@pytest.fixture
def model():
    return LectureModel(vocab_size=5, embedding_dim=8, prompt_length=3, response_length=3, seed=0)


def test_forward_returns_logits_not_hidden_states(model):
    # the lecture's forward returned [batch, pos, dim]; the vocab axis must be last
    logits = model(lecture_prompts())
    assert logits.shape == (3, 3, 5)
    model_wide = LectureModel(5, 16, 3, 3, seed=0)
    assert model_wide(lecture_prompts()).shape == (3, 3, 5)


def test_seed_makes_the_model_reproducible_without_touching_the_global_rng():
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = LectureModel(5, 8, 3, 3, seed=7)
    after = torch.rand(1)
    b = LectureModel(5, 8, 3, 3, seed=7)
    assert torch.equal(before, after)
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb)


def test_bad_inputs(model):
    prompts = lecture_prompts()
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model(torch.tensor([[1, 0, 9]]))
    with pytest.raises(ValueError, match="length 3"):
        model(torch.tensor([[1, 0, 2, 3]]))
    with pytest.raises(TypeError, match="integer token ids"):
        model(prompts.float())
    with pytest.raises(ValueError, match="num_samples"):
        sample_responses(model, prompts, 0)
    with pytest.raises(ValueError, match=r"responses holds token ids outside.*max 7"):
        compute_log_probs(model, prompts, torch.full((3, 2, 3), 7))
    with pytest.raises(ValueError, match=r"does not fit logits shape"):
        compute_log_probs(model, prompts, torch.zeros(2, 2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"batch, trial, pos"):
        compute_log_probs(model, prompts, torch.zeros(3, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="embedding_dim"):
        LectureModel(5, 0, 3, 3)
