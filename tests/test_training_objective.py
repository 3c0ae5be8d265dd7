"""The training objective (vaswani_hf.training.objective, Section 5.4): label-smoothed cross-entropy with eps/(V-1)
on the other classes (t2t v1, fairseq), per target token of the whole update; the model's own loss stays plain."""

from __future__ import annotations

import math

import pytest
import torch

from vaswani_hf import VaswaniConfig, VaswaniForConditionalGeneration
from vaswani_hf.training.objective import LabelSmoothedLoss, label_smoothed_nll


def test_label_smoothing_matches_a_dense_smoothed_target_distribution():
    torch.manual_seed(0)
    logits = torch.randn(2, 3, 10)
    labels = torch.tensor([[1, 4, -100], [9, -100, -100]])
    total, count = label_smoothed_nll(logits, labels, epsilon=0.1)
    assert count == 3
    expected = 0.0
    for b, t in [(0, 0), (0, 1), (1, 0)]:
        target = torch.full((10,), 0.1 / 9)
        target[labels[b, t]] = 0.9
        expected += -(target * torch.log_softmax(logits[b, t], -1)).sum()
    assert total.item() == pytest.approx(expected.item(), rel=1e-6)
    plain, _ = label_smoothed_nll(logits, labels, epsilon=0.0)
    ce = torch.nn.functional.cross_entropy(logits.view(-1, 10), labels.view(-1), reduction="sum")
    assert plain.item() == pytest.approx(ce.item(), rel=1e-6)


def test_training_objective_is_label_smoothed_hand_computed():
    """The trainer's objective (Section 5.4): eps = 0.1 over V = 4 classes: the target keeps 0.9, each other class
    gets 0.1 / 3 (t2t / fairseq), averaged over the target tokens (or over `num_items_in_batch`, the tokens of the
    whole update); the model's own loss stays the plain cross-entropy."""
    config = VaswaniConfig(vocab_size=4, d_model=8, d_ff=8, num_heads=2, num_encoder_layers=1, num_decoder_layers=1,
                           dropout=0.0)
    torch.manual_seed(0)
    model = VaswaniForConditionalGeneration(config).eval()
    input_ids = torch.tensor([[3, 1, 2]])
    labels = torch.tensor([[1, 3, -100]])  # last position ignored
    out = model(input_ids=input_ids, labels=labels)
    smoothed = LabelSmoothedLoss(0.1)(out, labels)
    logits = out.logits[0].tolist()
    total, plain, count = 0.0, 0.0, 0
    for t, y in enumerate([1, 3]):  # by hand, in Python floats
        z = logits[t]
        log_norm = math.log(sum(math.exp(v) for v in z))
        logp = [v - log_norm for v in z]
        total += -(0.9 * logp[y] + sum(0.1 / 3 * logp[j] for j in range(4) if j != y))
        plain += -logp[y]
        count += 1
    assert smoothed.item() == pytest.approx(total / count, rel=1e-5)
    assert LabelSmoothedLoss(0.1)(out, labels, num_items_in_batch=torch.tensor(4)).item() == pytest.approx(total / 4,
                                                                                                        rel=1e-5)
    assert out.loss.item() == pytest.approx(plain / count, rel=1e-5)  # the model's own loss: plain cross-entropy
    # a concrete number: uniform logits -> loss = log(4) whatever the smoothing
    uniform = torch.zeros(1, 1, 4)
    loss, n = label_smoothed_nll(uniform, torch.tensor([[2]]), 0.1)
    assert n == 1 and loss.item() == pytest.approx(math.log(4), rel=1e-6)


def test_the_objective_reads_nothing_back_from_the_device():
    """The count of targets stays a tensor (no int(), no .item()): on a GPU a training step has no device-to-host
    synchronisation, and torch.compile traces the objective as one graph."""
    logits, labels = torch.randn(2, 3, 7), torch.tensor([[1, 2, -100], [3, -100, -100]])
    total, count = label_smoothed_nll(logits, labels, 0.1)
    assert isinstance(count, torch.Tensor) and count.item() == 3
    explanation = torch._dynamo.explain(lambda x, y: label_smoothed_nll(x, y, 0.1)[0])(logits, labels)
    assert explanation.graph_break_count == 0 and explanation.graph_count == 1
