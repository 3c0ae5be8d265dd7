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
    config = VaswaniConfig(
        vocab_size=4, d_model=8, d_ff=8, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, dropout=0.0
    )
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
    assert LabelSmoothedLoss(0.1)(out, labels, num_items_in_batch=torch.tensor(4)).item() == pytest.approx(
        total / 4, rel=1e-5
    )
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


# -- the chunked loss: the same objective without the (tokens x V) logits ---------------------------------------------


def _hidden_weight_labels(seed=0, batch=3, length=11, d=16, vocab=37):
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(batch, length, d, generator=generator, requires_grad=True)
    weight = torch.randn(vocab, d, generator=generator, requires_grad=True)
    labels = torch.randint(0, vocab, (batch, length), generator=generator)
    labels[0, 7:] = -100  # padding at the end of two sentences
    labels[2, 3:] = -100
    return hidden, weight, labels


@pytest.mark.parametrize("chunk", [1, 4, 5, 33, 1000])
@pytest.mark.parametrize("epsilon", [0.0, 0.1])
def test_chunked_loss_equals_the_plain_loss_in_value_and_gradients(chunk, epsilon):
    """Any chunk size (one token, not dividing the token count, all tokens in one chunk): the sum, the count and the
    gradients with respect to the hidden states and the projection's weight are the plain path's, up to fp32
    summation order; the padded positions contribute nothing (their hidden states get a zero gradient)."""
    from vaswani_hf.training.objective import chunked_label_smoothed_nll

    hidden, weight, labels = _hidden_weight_labels()
    plain, count = label_smoothed_nll(hidden @ weight.T, labels, epsilon)
    plain_grads = torch.autograd.grad(plain * 0.5, (hidden, weight))
    chunked, chunked_count = chunked_label_smoothed_nll(hidden, weight, labels, epsilon, chunk=chunk)
    grads = torch.autograd.grad(chunked * 0.5, (hidden, weight))  # backward scales by the incoming gradient
    assert int(chunked_count) == int(count) == 7 + 11 + 3
    torch.testing.assert_close(chunked, plain, rtol=1e-5, atol=0)
    for got, want in zip(grads, plain_grads):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert grads[0][0, 7:].abs().max() == 0 and grads[0][2, 3:].abs().max() == 0


def test_chunked_loss_needs_no_gradient_and_stores_none_without_one():
    """Under no_grad (evaluation) the value is the same and nothing is kept for backward; with only the hidden states
    requiring a gradient (a frozen projection) only theirs is computed."""
    from vaswani_hf.training.objective import chunked_label_smoothed_nll

    hidden, weight, labels = _hidden_weight_labels(seed=1)
    plain, _ = label_smoothed_nll(hidden @ weight.T, labels, 0.1)
    with torch.no_grad():
        value, _ = chunked_label_smoothed_nll(hidden, weight, labels, 0.1, chunk=4)
    assert value.grad_fn is None
    torch.testing.assert_close(value, plain.detach(), rtol=1e-5, atol=0)
    frozen = weight.detach()
    value, _ = chunked_label_smoothed_nll(hidden, frozen, labels, 0.1, chunk=4)
    (grad,) = torch.autograd.grad(value, (hidden,))
    (want,) = torch.autograd.grad(label_smoothed_nll(hidden @ frozen.T, labels, 0.1)[0], (hidden,))
    torch.testing.assert_close(grad, want, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="chunk must be positive"):
        chunked_label_smoothed_nll(hidden, weight, labels, 0.1, chunk=0)
    with pytest.raises(ValueError, match="do not match"):
        chunked_label_smoothed_nll(hidden, weight[:, :8], labels, 0.1)


def test_chunked_loss_under_bf16_autocast_projects_in_bf16_like_lm_head():
    """Under autocast the chunk's projection runs in bf16, as `lm_head` does on the plain path, and the loss is taken
    from fp32 logits on both: the same numbers to bf16 rounding of the summation order."""
    from vaswani_hf.training.objective import chunked_label_smoothed_nll

    hidden, weight, labels = _hidden_weight_labels(seed=2)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        plain, _ = label_smoothed_nll(torch.nn.functional.linear(hidden, weight), labels, 0.1)
        chunked, _ = chunked_label_smoothed_nll(hidden, weight, labels, 0.1, chunk=4)
    plain_grads = torch.autograd.grad(plain, (hidden, weight))
    grads = torch.autograd.grad(chunked, (hidden, weight))
    assert chunked.dtype == torch.float32 and grads[1].dtype == torch.float32
    torch.testing.assert_close(chunked, plain, rtol=1e-3, atol=0)
    for got, want in zip(grads, plain_grads):
        torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)


def test_deferred_output_projection_gives_hidden_states_and_the_chunked_trainer_loss_equals_the_plain_one():
    """Inside `output_projection_deferred` the model's `logits` are the decoder's last hidden states (the projection
    is skipped, its weight is the tied embedding: Section 3.4), and the objective with `chunk_tokens` on them equals
    the plain objective on the real logits, gradients of every parameter included. Outside, the model is untouched."""
    from vaswani_hf.training.objective import output_projection_deferred

    config = VaswaniConfig(
        vocab_size=40, d_model=16, d_ff=32, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, dropout=0.0
    )
    torch.manual_seed(0)
    model = VaswaniForConditionalGeneration(config)
    input_ids = torch.tensor([[5, 6, 7, 2], [8, 9, 2, 0]])
    labels = torch.tensor([[11, 12, 13, 2], [14, 2, -100, -100]])
    inputs = {
        "input_ids": input_ids,
        "attention_mask": (input_ids != 0).long(),
        "decoder_input_ids": model.prepare_decoder_input_ids_from_labels(labels),
    }
    plain = LabelSmoothedLoss(0.1)(model(**inputs), labels, num_items_in_batch=torch.tensor(9))
    plain_grads = torch.autograd.grad(plain, list(model.parameters()))
    chunked_loss = LabelSmoothedLoss(0.1, chunk_tokens=3, output_projection=model.get_output_embeddings())
    with output_projection_deferred(model) as head:
        outputs = model(**inputs)
        assert head is model.lm_head and outputs.logits.shape == (2, 4, 16)
        chunked = chunked_loss(outputs, labels, num_items_in_batch=torch.tensor(9))
    grads = torch.autograd.grad(chunked, list(model.parameters()))
    torch.testing.assert_close(chunked, plain, rtol=1e-5, atol=0)
    for got, want in zip(grads, plain_grads):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)
    assert model(**inputs).logits.shape == (2, 4, 40)  # restored
    with pytest.raises(ValueError, match="output_projection"):
        LabelSmoothedLoss(0.1, chunk_tokens=3)
    model.lm_head = torch.nn.Linear(16, 40)  # with a bias: refused, not silently wrong
    with pytest.raises(ValueError, match="bias-free"), output_projection_deferred(model):
        pass
