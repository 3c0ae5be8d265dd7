"""The training objective and the model under transformers' own Seq2SeqTrainer (to be merged into
test_training_trainer.py)."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import write_corpus

from vaswani_hf import VaswaniConfig, VaswaniForConditionalGeneration

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_label_smoothing_loss_hand_computed():
    """eps = 0.1 over V = 4 classes: target keeps 0.9, each other class gets 0.1 / 3 (t2t / fairseq)."""
    config = VaswaniConfig(vocab_size=4, d_model=8, d_ff=8, num_heads=2, num_encoder_layers=1, num_decoder_layers=1,
                           label_smoothing=0.1, dropout=0.0)
    torch.manual_seed(0)
    model = VaswaniForConditionalGeneration(config).eval()
    input_ids = torch.tensor([[3, 1, 2]])
    labels = torch.tensor([[1, 3, -100]])  # last position ignored
    out = model(input_ids=input_ids, labels=labels)
    logits = out.logits[0].tolist()
    total, count = 0.0, 0
    for t, y in enumerate([1, 3]):  # by hand, in Python floats
        z = logits[t]
        log_norm = math.log(sum(math.exp(v) for v in z))
        logp = [v - log_norm for v in z]
        total += -(0.9 * logp[y] + sum(0.1 / 3 * logp[j] for j in range(4) if j != y))
        count += 1
    assert out.loss.item() == pytest.approx(total / count, rel=1e-5)
    # a concrete number: uniform logits -> loss = log(4) whatever the smoothing
    uniform = torch.zeros(1, 1, 4)
    from vaswani_hf.modeling_vaswani import label_smoothed_cross_entropy

    loss, n = label_smoothed_cross_entropy(uniform, torch.tensor([[2]]), 0.1)
    assert n == 1 and loss.item() == pytest.approx(math.log(4), rel=1e-6)


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
    from transformers import DataCollatorForSeq2Seq, Seq2SeqTrainer, Seq2SeqTrainingArguments, TrainerCallback

    grads = {}

    class Capture(TrainerCallback):
        def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
            if not grads:
                grads.update({n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None})

    config = VaswaniConfig(vocab_size=len(tok), d_model=32, d_ff=64, num_heads=2, num_encoder_layers=1,
                           num_decoder_layers=1, dropout=0.0)
    torch.manual_seed(0)
    model = VaswaniForConditionalGeneration(config)
    args = Seq2SeqTrainingArguments(
        output_dir=str(tmp_path / f"ga{accumulation}"), per_device_train_batch_size=batch_size,
        gradient_accumulation_steps=accumulation, max_steps=1, report_to=[], save_strategy="no", seed=0,
        disable_tqdm=True, use_cpu=True, dataloader_pin_memory=False, learning_rate=1e-3,
    )
    trainer = Seq2SeqTrainer(model=model, args=args, train_dataset=ds, processing_class=tok,
                             data_collator=DataCollatorForSeq2Seq(tok, model=model), callbacks=[Capture()])
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
    from transformers import DataCollatorForSeq2Seq, Seq2SeqTrainer, Seq2SeqTrainingArguments

    from vaswani_hf.evaluation import make_compute_metrics

    tok, ds = _tokenized_corpus(tmp_path, n=64)
    split = ds.train_test_split(test_size=8, seed=0)
    config = VaswaniConfig(vocab_size=len(tok), d_model=32, d_ff=64, num_heads=2, num_encoder_layers=1,
                           num_decoder_layers=1, dropout=0.0)
    model = VaswaniForConditionalGeneration(config)
    args = Seq2SeqTrainingArguments(
        output_dir=str(tmp_path / "plain"), per_device_train_batch_size=8, per_device_eval_batch_size=8,
        learning_rate=3e-3, max_steps=60, logging_steps=10, report_to=[], save_strategy="no", eval_strategy="no",
        predict_with_generate=True, generation_num_beams=2, generation_max_length=16, disable_tqdm=True,
        use_cpu=True, dataloader_pin_memory=False, seed=0,
    )
    trainer = Seq2SeqTrainer(model=model, args=args, train_dataset=split["train"], eval_dataset=split["test"],
                             processing_class=tok, data_collator=DataCollatorForSeq2Seq(tok, model=model),
                             compute_metrics=make_compute_metrics(tok))
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert losses[-1] < 0.7 * losses[0], losses
    metrics = trainer.evaluate()
    assert {"eval_loss", "eval_bleu", "eval_chrf", "eval_gen_len"} <= metrics.keys()
    assert 0.0 <= metrics["eval_bleu"] <= 100.0 and metrics["eval_gen_len"] > 0
