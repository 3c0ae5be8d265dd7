"""Tests of vaswani_hf.training.trainer.VaswaniTrainer's token batching (paper, Section 5.1) and evaluation loss:
token-budget DataLoaders, sentence-counting speed metrics, losses per target token whatever the budget, and the
one-time sharding of batches under Accelerate.

The training objective (label-smoothed cross-entropy, Section 5.4), and the model under transformers' own
Seq2SeqTrainer: gradient accumulation equals one large batch.
"""

from __future__ import annotations

import inspect
import math

import datasets
import pytest
import torch
from conftest import write_corpus
from data_helpers import random_lengths
from torch.utils.data import DataLoader
from transformers import Seq2SeqTrainer, Trainer
from transformers.modeling_outputs import Seq2SeqLMOutput

from vaswani_hf import VaswaniConfig, VaswaniForConditionalGeneration
from vaswani_hf.data.batching import Seq2SeqCollator, TokenBatchSampler
from vaswani_hf.data.corpora import load_corpus
from vaswani_hf.data.preprocessing import prepare_dataset
from vaswani_hf.training.trainer import VaswaniTrainer, unshard_prepared_loader


class TinySeq2Seq(torch.nn.Module):
    """Stand-in model with the seq2seq forward signature (keeps this test independent of the modeling code).

    VaswaniTrainer computes the loss from the logits itself (its `compute_loss_func`), so it calls forward without
    labels: what the model saw is recorded from the decoder inputs, which have the labels' shape."""

    def __init__(self, vocab=500):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, 8)
        self.out = torch.nn.Linear(8, vocab)
        self.seen = []

    def forward(self, input_ids=None, attention_mask=None, decoder_input_ids=None, labels=None):
        self.seen.append((tuple(input_ids.shape), tuple(decoder_input_ids.shape)))
        mask = attention_mask[..., None]
        ctx = (self.emb(input_ids) * mask).sum(1, keepdim=True) / mask.sum(1, keepdim=True)
        logits = self.out(self.emb(decoder_input_ids) + ctx)
        loss = None
        if labels is not None:
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
        return Seq2SeqLMOutput(loss=loss, logits=logits)


def _smoothed_sum(logits: torch.Tensor, labels: torch.Tensor, epsilon: float) -> torch.Tensor:
    """Label-smoothed cross-entropy summed over the labelled positions, by its definition (Section 5.4): the target
    keeps 1 - epsilon, each of the V - 1 other classes gets epsilon / (V - 1)."""
    logp = torch.log_softmax(logits.double(), dim=-1)
    keep = labels != -100
    logp, target = logp[keep], labels[keep]
    vocab = logp.shape[-1]
    target_logp = logp.gather(-1, target[:, None])[:, 0]
    others = logp.sum(-1) - target_logp
    return -((1 - epsilon) * target_logp + epsilon / (vocab - 1) * others).sum()


def _args(tmp_path, name, **kwargs):
    from transformers import Seq2SeqTrainingArguments

    return Seq2SeqTrainingArguments(
        output_dir=str(tmp_path / name), report_to=[], use_cpu=True, disable_tqdm=True, **kwargs
    )


def test_trainer_uses_token_batches(tmp_path, corpus_dir, tok):
    data, _ = prepare_dataset(load_corpus("moses", corpus_dir / "train", "en", "de"), tok, "en", "de")
    model = TinySeq2Seq()
    args = _args(
        tmp_path, "out", max_steps=3, per_device_train_batch_size=2, save_strategy="no", logging_steps=1, seed=5
    )
    trainer = VaswaniTrainer(
        model=model, args=args, train_dataset=data, eval_dataset=data, max_tokens=600, eval_max_tokens=800
    )
    dl = trainer.get_train_dataloader()
    sampler = TokenBatchSampler.from_dataset(data, 600, seed=5)
    assert len(dl) == len(sampler)
    batches = list(dl)
    assert sum(b["input_ids"].shape[0] for b in batches) == len(data)
    assert all(b["input_ids"].numel() <= 600 and b["labels"].numel() <= 600 for b in batches)
    assert max(b["input_ids"].shape[0] for b in batches) > 2  # not per_device_train_batch_size
    assert set(batches[0]) == {"input_ids", "attention_mask", "labels", "decoder_input_ids"}
    edl = trainer.get_eval_dataloader()
    assert all(b["input_ids"].numel() <= 800 for b in edl)
    metrics = trainer.train().metrics
    assert len(model.seen) == 3 and all(s[0] * s[1] <= 600 and t[0] * t[1] <= 600 for s, t in model.seen)
    # the samples' rate counts sentences, not batches x per_device_train_batch_size
    sentences = sum(s[0] for s, _ in model.seen)
    assert metrics["train_samples_per_second"] * metrics["train_runtime"] == pytest.approx(sentences, rel=1e-2)


def test_eval_loss_is_per_target_token_whatever_the_budget(tmp_path, corpus_dir, tok):
    """transformers' evaluation_loop weights every batch alike (the first batch's size); with token batches that
    made eval_loss depend on eval_max_tokens. Ours are per target token, the same for every budget: eval_loss is
    the training objective (label-smoothed, epsilon 0.1 by default), eval_nll the plain cross-entropy and eval_ppl
    its exponential."""
    data, _ = prepare_dataset(load_corpus("moses", corpus_dir / "train", "en", "de"), tok, "en", "de")
    torch.manual_seed(0)
    model = TinySeq2Seq().eval()
    collate = Seq2SeqCollator()
    with torch.no_grad():  # reference: one sentence at a time, summed over tokens
        sums, smoothed = [], []
        for i in range(len(data)):
            batch = collate([data[i]])
            out = model(**batch)
            sums.append((out.loss * len(data[i]["labels"]), len(data[i]["labels"])))
            smoothed.append(_smoothed_sum(out.logits, batch["labels"], 0.1))
    tokens = sum(n for _, n in sums)
    per_token = float(sum(s for s, _ in sums) / tokens)
    smoothed_per_token = float(sum(smoothed) / tokens)
    assert abs(smoothed_per_token - per_token) > 1e-3  # two different numbers, told apart by the checks below
    losses, nlls = [], []
    for budget in (200, 800):
        trainer = VaswaniTrainer(
            model=model, args=_args(tmp_path, f"out{budget}"), eval_dataset=data, max_tokens=budget
        )
        sizes = [b["input_ids"].shape[0] for b in trainer.get_eval_dataloader()]
        assert len(set(sizes)) > 1  # batches of unequal sentence counts: the case the plain Trainer gets wrong
        metrics = trainer.evaluate()
        losses.append(metrics["eval_loss"])
        nlls.append(metrics["eval_nll"])
        assert metrics["eval_ppl"] == pytest.approx(math.exp(metrics["eval_nll"]), rel=1e-9)
        # the speed metrics count real batches, not sentences / per_device_eval_batch_size
        assert metrics["eval_steps_per_second"] * metrics["eval_runtime"] == pytest.approx(len(sizes), rel=1e-2)
        assert metrics["eval_samples_per_second"] * metrics["eval_runtime"] == pytest.approx(len(data), rel=1e-2)
        predicted = trainer.predict(data).metrics
        assert predicted["test_steps_per_second"] * predicted["test_runtime"] == pytest.approx(len(sizes), rel=1e-2)
        assert predicted["test_loss"] == pytest.approx(metrics["eval_loss"], rel=1e-9)
    assert nlls[0] == pytest.approx(per_token, rel=1e-5) and nlls[1] == pytest.approx(per_token, rel=1e-5)
    assert losses[0] == pytest.approx(smoothed_per_token, rel=1e-5)
    assert losses[1] == pytest.approx(smoothed_per_token, rel=1e-5)


@pytest.mark.parametrize("rank", [0, 1])
def test_accelerate_prepare_shards_once(rank):
    """What `accelerator.prepare` does with 2 processes (accelerate.data_loader.prepare_data_loader) plus our
    pass-through fix: rank r gets exactly the sampler's rank-r batches, not half of them."""
    from accelerate.data_loader import prepare_data_loader

    src, tgt = random_lengths(n=400)
    ds = datasets.Dataset.from_dict({"input_ids": [[5] * int(n) for n in src], "labels": [[6] * int(n) for n in tgt]})
    sampler = TokenBatchSampler(src, tgt, 700, seed=2, num_replicas=2, rank=rank)
    loader = DataLoader(ds, batch_sampler=sampler, collate_fn=lambda x: x)
    prepared = prepare_data_loader(loader, num_processes=2, process_index=rank, put_on_device=False)
    assert prepared.batch_sampler.batch_sampler is sampler  # Accelerate wrapped it in BatchSamplerShard ...
    assert len(prepared) == -(-len(sampler) // 2)  # ... which would shard a second time
    prepared = unshard_prepared_loader(prepared, sampler)
    assert len(prepared) == len(sampler)
    assert [len(b) for b in prepared] == [len(b) for b in sampler]


# ---------------------------------------------------------------------------------------------------------------------
# The objective, and the model under transformers' own Seq2SeqTrainer
# ---------------------------------------------------------------------------------------------------------------------


def _tokenized_corpus(tmp_path, n=32):
    from datasets import Dataset

    from vaswani_hf.tokenization import train_bpe_tokenizer

    corpus = write_corpus(tmp_path / "corpus", n_train=n, n_valid=8)
    en = (corpus / "train.en").read_text().splitlines()
    de = (corpus / "train.de").read_text().splitlines()
    tok = train_bpe_tokenizer([corpus / "train.en", corpus / "train.de"], vocab_size=300, show_progress=False)

    def encode(batch):
        return tok(batch["en"], text_target=batch["de"])

    ds = Dataset.from_dict({"en": en, "de": de}).map(encode, batched=True, remove_columns=["en", "de"])
    return tok, ds


def _grads_after_one_update(tmp_path, tok, ds, batch_size, accumulation):
    from transformers import (
        DataCollatorForSeq2Seq,
        Seq2SeqTrainer,
        Seq2SeqTrainingArguments,
        TrainerCallback,
    )

    grads = {}

    class Capture(TrainerCallback):
        def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
            if not grads:
                grads.update({n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None})

    config = VaswaniConfig(
        vocab_size=len(tok), d_model=32, d_ff=64, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, dropout=0.0
    )
    torch.manual_seed(0)
    model = VaswaniForConditionalGeneration(config)
    args = Seq2SeqTrainingArguments(
        output_dir=str(tmp_path / f"ga{accumulation}"),
        per_device_train_batch_size=batch_size,
        gradient_accumulation_steps=accumulation,
        max_steps=1,
        report_to=[],
        save_strategy="no",
        seed=0,
        disable_tqdm=True,
        use_cpu=True,
        dataloader_pin_memory=False,
        learning_rate=1e-3,
    )
    trainer = Seq2SeqTrainer(
        model=model,
        args=args,
        train_dataset=ds,
        processing_class=tok,
        data_collator=DataCollatorForSeq2Seq(tok, model=model),
        callbacks=[Capture()],
    )
    trainer.train()
    return grads


def test_gradient_accumulation_equals_large_batch(tmp_path):
    """2 micro-batches of 4 (token-normalised by num_items_in_batch) == one batch of 8: same gradient, same update."""
    tok, ds = _tokenized_corpus(tmp_path)
    big = _grads_after_one_update(tmp_path, tok, ds, batch_size=8, accumulation=1)
    acc = _grads_after_one_update(tmp_path, tok, ds, batch_size=4, accumulation=2)
    assert big.keys() == acc.keys() and big
    for name in big:
        torch.testing.assert_close(acc[name], big[name], rtol=1e-4, atol=1e-7, msg=name)


@pytest.mark.slow
def test_plain_seq2seq_trainer_trains_and_generates(tmp_path):
    from transformers import (
        DataCollatorForSeq2Seq,
        Seq2SeqTrainer,
        Seq2SeqTrainingArguments,
    )

    from vaswani_hf.metrics.scores import make_compute_metrics

    tok, ds = _tokenized_corpus(tmp_path, n=64)
    split = ds.train_test_split(test_size=8, seed=0)
    config = VaswaniConfig(
        vocab_size=len(tok), d_model=32, d_ff=64, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, dropout=0.0
    )
    model = VaswaniForConditionalGeneration(config)
    args = Seq2SeqTrainingArguments(
        output_dir=str(tmp_path / "plain"),
        per_device_train_batch_size=8,
        per_device_eval_batch_size=8,
        learning_rate=3e-3,
        max_steps=60,
        logging_steps=10,
        report_to=[],
        save_strategy="no",
        eval_strategy="no",
        predict_with_generate=True,
        generation_num_beams=2,
        generation_max_length=16,
        disable_tqdm=True,
        use_cpu=True,
        dataloader_pin_memory=False,
        seed=0,
    )
    trainer = Seq2SeqTrainer(
        model=model,
        args=args,
        train_dataset=split["train"],
        eval_dataset=split["test"],
        processing_class=tok,
        data_collator=DataCollatorForSeq2Seq(tok, model=model),
        compute_metrics=make_compute_metrics(tok),
    )
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert losses[-1] < 0.7 * losses[0], losses
    metrics = trainer.evaluate()
    assert {"eval_loss", "eval_bleu", "eval_chrf", "eval_gen_len"} <= metrics.keys()
    assert 0.0 <= metrics["eval_bleu"] <= 100.0 and metrics["eval_gen_len"] > 0


@pytest.mark.slow
def test_the_torch_compile_key_compiles_the_step_through_the_trainer_and_it_equals_eager(tmp_path, monkeypatch):
    """`torch_compile: true` reaches transformers' own mechanism (TrainingArguments.torch_compile -> Accelerate's
    dynamo plugin): the model the Trainer steps is compiled, with no graph break (no `.item()` or `int(tensor)`, a
    device-to-host sync on a GPU, inside the step), and the compiled updates give the eager run's losses. The backend
    is aot_eager here (the same kernels as eager, traced through dynamo and AOT autograd, where a break or a sync
    would show) because inductor's C++ code generation takes minutes on 2 CPU cores."""
    from conftest import losses_by_step, tiny_recipe
    from torch._dynamo.utils import counters

    from vaswani_hf.training import trainer as trainer_module
    from vaswani_hf.training.plan import plan_run
    from vaswani_hf.training.run import run_training

    build = trainer_module.build_training_arguments

    def aot_eager(plan):
        args = build(plan)
        if args.torch_compile:
            args.torch_compile_backend = "aot_eager"
        return args

    monkeypatch.setattr(trainer_module, "build_training_arguments", aot_eager)
    losses = {}
    for compiled in (False, True):
        torch._dynamo.reset()
        counters.clear()
        recipe = tiny_recipe(tmp_path / str(compiled), max_steps=4, torch_compile=compiled, dropout=0.0)
        assert run_training(plan_run(recipe))["global_step"] == 4
        losses[compiled] = losses_by_step(recipe.run.output_dir)
        if compiled:
            assert counters["stats"]["unique_graphs"] >= 1  # the step ran compiled
            assert not counters["graph_break"], dict(counters["graph_break"])
    torch._dynamo.reset()
    assert list(losses[True]) == [1, 2, 3, 4]
    for step, loss in losses[False].items():
        assert losses[True][step] == pytest.approx(loss, rel=1e-5), step


def test_the_loss_chunk_tokens_key_trains_with_the_plain_losses(tmp_path):
    """`loss_chunk_tokens` (the chunked label-smoothed loss, for GPU memory) through the whole run: the trainer calls
    the model with its projection deferred and projects 5 target tokens at a time, and every update's loss equals the
    plain path's (so do the updates: the later losses would drift otherwise). Checks that the trainer's objective
    stays the same when chunked."""
    from conftest import losses_by_step, tiny_recipe

    from vaswani_hf.training.plan import plan_run
    from vaswani_hf.training.run import run_training

    losses = {}
    for chunk in (0, 5):
        recipe = tiny_recipe(tmp_path / str(chunk), max_steps=4, dropout=0.0, loss_chunk_tokens=chunk)
        assert run_training(plan_run(recipe))["global_step"] == 4
        losses[chunk] = losses_by_step(recipe.run.output_dir)
    assert list(losses[5]) == list(losses[0]) == [1, 2, 3, 4]
    for step, loss in losses[0].items():
        assert losses[5][step] == pytest.approx(loss, rel=1e-5), step


def test_a_chunked_loss_refuses_a_custom_objective(tmp_path):
    model = VaswaniForConditionalGeneration(
        VaswaniConfig(vocab_size=20, d_model=8, d_ff=8, num_heads=2, num_encoder_layers=1, num_decoder_layers=1)
    )
    with pytest.raises(ValueError, match="compute_loss_func"):
        VaswaniTrainer(
            model=model,
            args=_args(tmp_path, "x"),
            max_tokens=64,
            loss_chunk_tokens=8,
            compute_loss_func=lambda outputs, labels, num_items_in_batch=None: outputs.logits.sum(),
        )


# transformers' private parts that VaswaniTrainer depends on, where no public mechanism exists. An override of a hook
# that transformers renamed or stopped calling would be silently bypassed: these tests fail first.
PRIVATE_HOOKS = {  # overridden: name -> transformers' parameters
    "_get_grad_norm": ["self", "model", "grad_norm"],  # no extra pass over the gradients when nothing is clipped
    "_issue_warnings_after_load": ["self", "load_result"],  # keys tied to a loaded tensor are not "missing"
    "_get_output_dir": ["self", "trial"],  # checkpoints staged beside the run, then renamed (atomic)
    "_save_checkpoint": ["self", "model", "trial"],
}
PRIVATE_USES = {  # read, set or called: name -> where transformers defines or sets it
    "_created_lr_scheduler": "Trainer",  # set with the paper's schedule, as transformers' create_scheduler does
    "_gen_kwargs": "Seq2SeqTrainer",  # evaluate()'s decoding settings, read by prediction_step
    "_prepare_inputs": "Trainer",
    "_remove_unused_columns": "Trainer",
    "_wrap_model": "Trainer",
}


def test_the_private_trainer_hooks_overridden_are_still_transformers_own():
    overridden = {
        name
        for name in vars(VaswaniTrainer)
        if name.startswith("_") and not name.startswith("__") and hasattr(Seq2SeqTrainer, name)
    }
    assert overridden == set(PRIVATE_HOOKS), "a private hook overridden without being listed here (or no more)"
    loop = inspect.getsource(Trainer)
    for name, parameters in PRIVATE_HOOKS.items():
        assert list(inspect.signature(getattr(Seq2SeqTrainer, name)).parameters) == parameters, name
        assert f"self.{name}(" in loop, f"transformers' Trainer no longer calls {name}: VaswaniTrainer's is dead"
    sources = {"Trainer": loop, "Seq2SeqTrainer": inspect.getsource(Seq2SeqTrainer)}
    for name, owner in PRIVATE_USES.items():
        assert f"self.{name}" in sources[owner] or f"def {name}(" in sources[owner], f"{owner}.{name} is gone"
