"""Section 5.3: the learning-rate formula, the schedule that applies it at every update, and Adam (fused kernel)."""

from __future__ import annotations

import pytest
import torch

from vaswani_hf import VaswaniConfig, VaswaniForConditionalGeneration
from vaswani_hf.training.objective import get_paper_schedule, paper_learning_rate, with_fused_adam

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_paper_formula_values():
    # lrate = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), computed by hand for d_model = 512, warmup = 4000
    assert paper_learning_rate(1, 512) == pytest.approx(512**-0.5 * 4000**-1.5, rel=1e-12)
    assert paper_learning_rate(4000, 512) == pytest.approx(0.044194173824159216 * 0.015811388300841896, rel=1e-12)
    assert paper_learning_rate(16000, 512) == pytest.approx(512**-0.5 / 126.49110640673517, rel=1e-12)
    assert paper_learning_rate(4000, 512) == pytest.approx(6.987712429686844e-04, rel=1e-12)  # the peak
    with pytest.raises(ValueError):
        paper_learning_rate(0, 512)


@pytest.mark.parametrize("d_model,warmup,multiplier", [(512, 4000, 1.0), (1024, 4000, 1.0), (64, 10, 2.0)])
def test_schedule_equals_formula_at_each_update(d_model, warmup, multiplier):
    """The k-th optimizer update runs with lrate(step_num = k): no one-step lag (see paper_lr_lambda)."""
    param = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.Adam([param], lr=multiplier * d_model**-0.5, betas=(0.9, 0.98), eps=1e-9)
    sched = get_paper_schedule(opt, warmup)
    checkpoints = {1, 2, 3, warmup - 1, warmup, warmup + 1, 2 * warmup, 5 * warmup}
    for k in range(1, 5 * warmup + 1):
        lr_used = opt.param_groups[0]["lr"]  # what optimizer.step() of update k uses
        if k in checkpoints:
            assert lr_used == pytest.approx(paper_learning_rate(k, d_model, warmup, multiplier), rel=1e-12), k
        opt.step()
        sched.step()


def test_fused_adam_matches_default_adam():
    """`fused=True` (what the Trainer gets on CPU / CUDA) makes the same updates as torch's default Adam.

    Ten updates of the paper's Adam(0.9, 0.98, 1e-9) at lr 1e-3 on the same gradients: the two implementations
    differ only in float rounding of the same formula, so the weights agree to 1e-6 (an update is ~1e-3 per
    weight; a wrong bias correction or epsilon placement would show at that size).
    """
    torch.manual_seed(0)
    config = VaswaniConfig(
        vocab_size=40, d_model=16, d_ff=32, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, dropout=0.0
    )
    ref = VaswaniForConditionalGeneration(config)
    fused = VaswaniForConditionalGeneration(config)
    fused.load_state_dict(ref.state_dict())
    kwargs = {"lr": 1e-3, "betas": (0.9, 0.98), "eps": 1e-9}
    assert with_fused_adam(kwargs, fused) == {**kwargs, "fused": True}
    opt_ref = torch.optim.Adam(ref.parameters(), **kwargs)
    opt_fused = torch.optim.Adam(fused.parameters(), **with_fused_adam(kwargs, fused))
    batch = {"input_ids": torch.randint(3, 40, (3, 7)), "labels": torch.randint(3, 40, (3, 5))}
    start = {n: p.detach().clone() for n, p in ref.named_parameters()}
    for _ in range(10):
        for model, opt in ((ref, opt_ref), (fused, opt_fused)):
            opt.zero_grad()
            model(**batch).loss.backward()
            opt.step()
    moved = max((p - start[n]).abs().max().item() for n, p in ref.named_parameters())
    assert moved > 1e-3  # the comparison below is about real updates
    for (n, a), b in zip(ref.named_parameters(), fused.parameters()):
        torch.testing.assert_close(b, a, atol=1e-6, rtol=1e-5, msg=n)


def test_fused_adam_only_where_it_is_safe():
    """A recipe's own `fused` / `foreach` choice wins; parameters on a device type we have not run stay on torch's
    default (here the meta device, standing in for any backend without a fused kernel)."""
    model = torch.nn.Linear(3, 3)
    assert with_fused_adam({"lr": 1.0, "foreach": True}, model) == {"lr": 1.0, "foreach": True}
    assert with_fused_adam({"lr": 1.0, "fused": False}, model) == {"lr": 1.0, "fused": False}
    assert with_fused_adam({"lr": 1.0}, torch.nn.Linear(3, 3, device="meta")) == {"lr": 1.0}
    frozen = torch.nn.Linear(3, 3)
    frozen.requires_grad_(False)
    assert with_fused_adam({"lr": 1.0}, frozen) == {"lr": 1.0}
