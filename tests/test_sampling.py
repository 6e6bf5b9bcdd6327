"""Sampling (pgrl_helpers.sampling): shapes, seeding, the [batch, trial, pos] layout, frequencies,
log-probs against direct indexing, greedy decoding and entropy.
"""

from __future__ import annotations

import pytest
import torch

from pgrl_helpers.models import LectureModel
from pgrl_helpers.sampling import (
    compute_log_probs,
    greedy_responses,
    sample_responses,
    token_entropy,
)
from pgrl_helpers.sort_task import lecture_prompts


@pytest.fixture
def model():
    return LectureModel(vocab_size=5, embedding_dim=8, prompt_length=3, response_length=3, seed=0)


def test_sampling_shapes_and_seed(model):
    prompts = lecture_prompts()
    a = sample_responses(model, prompts, 10, generator=torch.Generator().manual_seed(0))
    b = sample_responses(model, prompts, 10, generator=torch.Generator().manual_seed(0))
    assert a.shape == (3, 10, 3) and a.dtype == torch.long
    assert torch.equal(a, b)
    assert int(a.min()) >= 0 and int(a.max()) < 5


def test_sampling_layout_is_batch_trial_pos():
    # a model that is certain: position p always emits token p (+ batch index) -> checks the rearrange
    class Certain(torch.nn.Module):
        vocab_size = 6

        def forward(self, prompts):
            batch, pos = prompts.shape
            logits = torch.full((batch, pos, self.vocab_size), -1e9)
            for b in range(batch):
                for p in range(pos):
                    logits[b, p, b + p] = 0.0
            return logits

    responses = sample_responses(Certain(), torch.zeros(2, 3, dtype=torch.long), 4)
    expected = torch.tensor([[[0, 1, 2]] * 4, [[1, 2, 3]] * 4])
    assert torch.equal(responses, expected)


def test_sample_frequencies_match_the_policy(model):
    prompts = lecture_prompts()[:1]
    responses = sample_responses(model, prompts, 20_000, generator=torch.Generator().manual_seed(1))
    probs = torch.softmax(model(prompts), -1)[0]  # [pos, vocab]
    freq = torch.stack([torch.bincount(responses[0, :, p], minlength=5) for p in range(3)]) / 20_000
    torch.testing.assert_close(freq, probs.detach(), atol=0.015, rtol=0)


def test_log_probs_match_direct_indexing(model):
    prompts = lecture_prompts()
    responses = sample_responses(model, prompts, 4, generator=torch.Generator().manual_seed(2))
    log_probs = compute_log_probs(model, prompts, responses)
    assert log_probs.shape == (3, 4, 3)
    table = torch.log_softmax(model(prompts), -1)
    for b in range(3):
        for t in range(4):
            for p in range(3):
                assert log_probs[b, t, p] == table[b, p, responses[b, t, p]]
    assert log_probs.requires_grad  # differentiable unless the caller freezes it


def test_greedy_and_entropy(model):
    prompts = lecture_prompts()
    greedy = greedy_responses(model, prompts)
    assert greedy.shape == (3, 1, 3)
    assert torch.equal(greedy[:, 0], model(prompts).argmax(-1))
    entropy = token_entropy(model, prompts)
    assert entropy.shape == (3, 3)
    assert (entropy > 0).all() and (entropy <= torch.log(torch.tensor(5.0)) + 1e-6).all()
