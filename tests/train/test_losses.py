"""The trainers' loss functions on small worked examples (numbers computed by hand in comments)."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("torch", reason="the train extra is not installed")
import torch  # noqa: E402

from orchestrion.train._losses import (  # noqa: E402
    completion_mask,
    grpo_loss,
    pad_batch,
    reverse_kl,
    rwr_loss,
    token_logprobs,
)


def t(x: object) -> torch.Tensor:
    return torch.tensor(x, dtype=torch.float32)


# -- GRPO ---------------------------------------------------------------------------------
def test_ratio_one_gives_minus_mean_advantage() -> None:
    logp = t([[-1.0, -2.0], [-0.5, -0.1]])
    loss, stats = grpo_loss(logp, logp.clone(), t([1.0, -0.5]), torch.ones(2, 2))
    # every ratio is 1: loss = -(1 + 1 - 0.5 - 0.5) / 4 = -0.25
    assert loss.item() == pytest.approx(-0.25)
    assert stats["ratio"] == pytest.approx(1.0) and stats["clip_frac"] == 0.0


def test_token_level_mean_over_unequal_lengths() -> None:
    logp = t([[-1.0, -1.0, -1.0], [-1.0, 0.0, 0.0]])
    weights = t([[1, 1, 1], [1, 0, 0]])
    loss, _ = grpo_loss(logp, logp.clone(), t([1.0, -2.0]), weights)
    # three tokens with A=1 and one with A=-2: -(3 - 2) / 4 = -0.25 (not the per-sequence mean, -(1 - 2)/2)
    assert loss.item() == pytest.approx(-0.25)


def test_gradient_is_minus_advantage_over_token_count() -> None:
    logp = t([[-1.0, -2.0]]).requires_grad_()
    loss, _ = grpo_loss(logp, logp.detach().clone(), t([2.0]), torch.ones(1, 2))
    loss.backward()
    # d/dlogp of -(A * exp(logp - old)) / 2 at ratio 1 is -A/2 = -1 per token
    assert logp.grad is not None
    assert logp.grad[0].tolist() == pytest.approx([-1.0, -1.0])


def test_clipping() -> None:
    old = t([[0.0]])
    up = t([[math.log(1.5)]]).requires_grad_()
    # ratio 1.5, A=+1, eps 0.2: min(1.5, 1.2) = 1.2 -> loss -1.2, clipped so no gradient
    loss, stats = grpo_loss(up, old, t([1.0]), torch.ones(1, 1), clip_eps=0.2)
    loss.backward()
    assert loss.item() == pytest.approx(-1.2)
    assert stats["clip_frac"] == 1.0 and stats["ratio"] == pytest.approx(1.5)
    assert up.grad is not None and up.grad.item() == 0.0
    # ratio 1.5, A=-1: min(-1.5, -1.2) = -1.5 -> loss 1.5, not clipped (the pessimistic side)
    loss, stats = grpo_loss(up.detach(), old, t([-1.0]), torch.ones(1, 1), clip_eps=0.2)
    assert loss.item() == pytest.approx(1.5) and stats["clip_frac"] == 0.0
    # ratio 0.5, A=+1: min(0.5, 0.8) = 0.5 -> loss -0.5; ratio 0.5, A=-1: min(-0.5, -0.8) -> loss 0.8, clipped
    half = t([[math.log(0.5)]])
    assert grpo_loss(half, old, t([1.0]), torch.ones(1, 1))[0].item() == pytest.approx(-0.5)
    loss, stats = grpo_loss(half, old, t([-1.0]), torch.ones(1, 1))
    assert loss.item() == pytest.approx(0.8) and stats["clip_frac"] == 1.0


def test_kl_penalty_k3() -> None:
    logp = t([[-1.0, -1.0]])
    same, stats = grpo_loss(logp, logp, t([0.0]), torch.ones(1, 2), ref_logp=logp, kl_beta=0.5)
    assert same.item() == pytest.approx(0.0) and stats["kl"] == pytest.approx(0.0)
    ref = logp + math.log(2.0)
    # k3 with ref/pi = 2: 2 - ln 2 - 1 = 0.306853; beta 0.1 -> 0.0306853 (advantage 0 adds nothing)
    loss, stats = grpo_loss(logp, logp, t([0.0]), torch.ones(1, 2), ref_logp=ref, kl_beta=0.1)
    assert stats["kl"] == pytest.approx(1 - math.log(2.0))
    assert loss.item() == pytest.approx(0.1 * (1 - math.log(2.0)))
    # beta 0 reports the KL but does not add it
    loss, stats = grpo_loss(logp, logp, t([0.0]), torch.ones(1, 2), ref_logp=ref, kl_beta=0.0)
    assert loss.item() == pytest.approx(0.0) and stats["kl"] > 0


def test_weights_mask_tokens() -> None:
    old = torch.zeros(1, 3)
    weights = t([[1, 0, 1]])
    a, _ = grpo_loss(t([[0.1, 0.0, -0.1]]), old, t([1.0]), weights)
    b, _ = grpo_loss(t([[0.1, 5.0, -0.1]]), old, t([1.0]), weights)  # the masked token changed
    assert a.item() == pytest.approx(b.item())
    # per-token advantages ([B, T]) are accepted too
    c, _ = grpo_loss(old, old, t([[1.0, 9.0, 3.0]]), weights)
    assert c.item() == pytest.approx(-2.0)  # -(1 + 3) / 2


# -- reverse KL and RWR ------------------------------------------------------------------------
def test_reverse_kl_identical_is_zero_and_positive_otherwise() -> None:
    logits = torch.randn(2, 3, 7)
    mask = torch.ones(2, 3)
    assert reverse_kl(logits, logits.clone(), mask).item() == pytest.approx(0.0, abs=1e-6)
    assert reverse_kl(logits, torch.randn(2, 3, 7), mask).item() > 0


def test_reverse_kl_worked_example_and_direction() -> None:
    student = t([[[0.0, 0.0]]])             # p_s = (1/2, 1/2)
    teacher = t([[[0.0, math.log(3.0)]]])   # p_t = (1/4, 3/4)
    # KL(s||t) = 1/2 ln(2) + 1/2 ln(2/3) = 1/2 ln(4/3) = 0.143841
    assert reverse_kl(student, teacher, torch.ones(1, 1)).item() == pytest.approx(0.5 * math.log(4 / 3), abs=1e-6)
    # KL(t||s) = 1/4 ln(1/2) + 3/4 ln(3/2) = 0.130812: the argument order matters
    assert reverse_kl(teacher, student, torch.ones(1, 1)).item() == pytest.approx(
        0.25 * math.log(0.5) + 0.75 * math.log(1.5), abs=1e-6)


def test_reverse_kl_mask_and_per_decision_mean() -> None:
    student = torch.zeros(2, 2, 2)
    teacher = torch.zeros(2, 2, 2)
    teacher[0, 0] = t([0.0, math.log(3.0)])
    teacher[1, 1] = t([50.0, -50.0])  # a masked position: must not count
    mask = t([[1, 1], [1, 0]])
    # row 0: (0.143841 + 0) / 2; row 1: 0 / 1 -> mean over rows 0.0359603
    assert reverse_kl(student, teacher, mask).item() == pytest.approx(0.5 * math.log(4 / 3) / 4, abs=1e-6)


def test_reverse_kl_teacher_gets_no_gradient() -> None:
    student = torch.randn(1, 2, 5, requires_grad=True)
    teacher = torch.randn(1, 2, 5, requires_grad=True)
    reverse_kl(student, teacher, torch.ones(1, 2)).backward()
    assert student.grad is not None and student.grad.abs().sum() > 0
    assert teacher.grad is None


def test_rwr_loss() -> None:
    logp = t([[-1.0, -3.0], [-2.0, -7.0]])
    mask = t([[1, 1], [1, 0]])
    # row 0: -(1.0 * mean(-1, -3)) = 2; row 1: -(0.5 * -2) = 1 (the -7 is padding) -> 1.5
    assert rwr_loss(logp, t([1.0, 0.5]), mask).item() == pytest.approx(1.5)
    assert rwr_loss(logp, t([0.0, 0.0]), mask).item() == pytest.approx(0.0)


# -- log-probs on a (tiny, random) causal LM -----------------------------------------------------
@pytest.fixture(scope="module")
def tiny_lm() -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return LlamaForCausalLM(config).eval()


def test_token_logprobs_match_full_forward_and_ignore_padding(tiny_lm: torch.nn.Module) -> None:
    prompts = [[1, 2, 3, 4, 5], [7, 8]]
    completions = [[9, 10], [11, 12, 13, 14]]
    with torch.no_grad():
        batched = token_logprobs(tiny_lm, prompts, completions)
        for row, (p, c) in enumerate(zip(prompts, completions)):
            full = tiny_lm(input_ids=torch.tensor([p + c])).logits[0].log_softmax(-1)
            expected = [full[len(p) - 1 + j, tok].item() for j, tok in enumerate(c)]
            assert batched[row, : len(c)].tolist() == pytest.approx(expected, abs=1e-4)
            assert batched[row, len(c):].abs().sum().item() == 0.0
    assert completion_mask(completions).tolist() == [[1, 1, 0, 0], [1, 1, 1, 1]]


def test_pad_batch_layout() -> None:
    b = pad_batch([[5, 6, 7], [8]], [[1], [2, 3]], pad_id=0)
    assert b.input_ids.tolist() == [[5, 6, 7, 1, 0], [0, 0, 8, 2, 3]]
    assert b.attention_mask.tolist() == [[1, 1, 1, 1, 0], [0, 0, 1, 1, 1]]
    assert b.position_ids.tolist() == [[0, 1, 2, 3, 3], [0, 0, 0, 1, 2]]
    assert b.targets.tolist() == [[1, 0], [2, 3]] and b.mask.tolist() == [[1, 0], [1, 1]]
    with pytest.raises(ValueError):
        pad_batch([[1]], [[1], [2]])
