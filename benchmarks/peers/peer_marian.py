#!/usr/bin/env python
"""The transformers path in the peer benchmark: what `examples/pytorch/translation/run_translation.py` does for a
`MarianMTModel` trained from scratch, written here because that script cannot be fetched at benchmark time:
`AutoTokenizer` + `Dataset.map` tokenisation (`tokenizer(inputs, text_target=targets, max_length, truncation)`),
`DataCollatorForSeq2Seq`, `Seq2SeqTrainer` with `train_sampling_strategy="group_by_length"` (transformers 5's name
for `--group_by_length`), label smoothing, and transformers' default optimizer (fused AdamW with torch >= 2.8).
Runs in its own environment (torch, transformers, datasets, accelerate): it imports nothing of vaswani_hf.

    python peer_marian.py train --spec JSON --bpe DIR --train PREFIX --out DIR --events FILE --minutes M --marks S,S
    python peer_marian.py translate --checkpoint DIR --bpe DIR --source FILE --beams 4 --out FILE

What run_translation.py does not have and this script adds: `--group_by target` (its mega-batches sorted by target
length, see `target_grouped`), a wall-clock budget and checkpoints at fixed training
times (a callback, as `save_strategy` knows only steps and epochs), and `hf_phases`' clock and token counts.
"""

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def read_lines(path: str) -> list[str]:
    return Path(path).read_text(encoding="utf-8").splitlines()


def marian_config(spec: dict, vocab_size: int):
    """MarianMTModel with the benchmark's sizes: post-norm, sinusoidal positions, one shared embedding."""
    from transformers import MarianConfig

    return MarianConfig(
        vocab_size=vocab_size,
        decoder_vocab_size=vocab_size,
        d_model=spec["d_model"],
        encoder_layers=spec["num_encoder_layers"],
        decoder_layers=spec["num_decoder_layers"],
        encoder_attention_heads=spec["num_heads"],
        decoder_attention_heads=spec["num_heads"],
        encoder_ffn_dim=spec["d_ff"],
        decoder_ffn_dim=spec["d_ff"],
        activation_function="relu",
        dropout=spec["dropout"],
        attention_dropout=0.0,
        activation_dropout=0.0,
        max_position_embeddings=512,
        scale_embedding=True,
        pad_token_id=0,
        eos_token_id=2,
        bos_token_id=1,
        decoder_start_token_id=0,
        forced_eos_token_id=None,
        share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True,
    )


def tokenized_split(prefix: str, tokenizer, max_length: int):
    """run_translation.py's preprocessing: source and target through the tokenizer, truncated at max_length."""
    import datasets

    raw = datasets.Dataset.from_dict({"source": read_lines(f"{prefix}.en"), "target": read_lines(f"{prefix}.de")})

    def preprocess(batch):
        inputs = tokenizer(batch["source"], max_length=max_length, truncation=True)
        inputs["labels"] = tokenizer(text_target=batch["target"], max_length=max_length, truncation=True)["input_ids"]
        return inputs

    return raw.map(preprocess, batched=True, remove_columns=["source", "target"])


def budget_callback(budget_s: float, marks: list[float]):
    from transformers import TrainerCallback

    class WallClock(TrainerCallback):
        """Save at each mark of training time and stop (saving) once the budget is spent."""

        def on_train_begin(self, args, state, control, **kwargs):
            self.start, self.marks = time.perf_counter(), sorted(marks)

        def on_step_end(self, args, state, control, **kwargs):
            elapsed = time.perf_counter() - self.start
            if self.marks and elapsed >= self.marks[0]:
                control.should_save = True
                self.marks = [m for m in self.marks if m > elapsed]
            if elapsed >= budget_s:
                control.should_training_stop = True
                control.should_save = True
            return control

    return WallClock()


def target_grouped(trainer_class):
    """`trainer_class` with group_by_length over target lengths, the grouping a maintainer would pick for a
    seq2seq model whose cost is the target side. Hand-written because the documented way does not work in
    transformers 5.24: a `length` column (`length_column_name`) is removed by `_remove_unused_columns` before
    `_get_train_sampler` reads it, so the sampler silently falls back to the source length (input_ids)."""
    from transformers.trainer_pt_utils import LengthGroupedSampler

    class TargetGrouped(trainer_class):
        def _get_train_sampler(self, train_dataset=None):
            dataset = train_dataset if train_dataset is not None else self.train_dataset
            lengths = [len(labels) for labels in dataset["labels"]]
            return LengthGroupedSampler(
                self.args.train_batch_size * self.args.gradient_accumulation_steps, lengths=lengths
            )

    return TargetGrouped


def train(args) -> int:
    import torch
    from hf_phases import install
    from transformers import (
        AutoTokenizer,
        DataCollatorForSeq2Seq,
        MarianMTModel,
        Seq2SeqTrainer,
        Seq2SeqTrainingArguments,
        set_seed,
    )

    torch.set_num_threads(args.threads)
    spec = json.loads(args.spec)
    tokenizer = AutoTokenizer.from_pretrained(args.bpe)
    train_set = tokenized_split(args.train, tokenizer, spec["max_length"])
    set_seed(spec["seed"])
    model = MarianMTModel(marian_config(spec, len(tokenizer)))
    warmup = spec["warmup_steps"]
    training_args = Seq2SeqTrainingArguments(
        output_dir=args.out,
        per_device_train_batch_size=args.batch_sentences,
        train_sampling_strategy="group_by_length",
        learning_rate=spec["d_model"] ** -0.5 * warmup**-0.5,
        lr_scheduler_type="inverse_sqrt",
        warmup_steps=warmup,
        adam_beta1=spec["adam_beta1"],
        adam_beta2=spec["adam_beta2"],
        adam_epsilon=spec["adam_epsilon"],
        weight_decay=0.0,
        max_grad_norm=0.0,
        label_smoothing_factor=spec["label_smoothing"],
        max_steps=10**7,
        logging_steps=spec["logging_steps"],
        save_strategy="no",
        eval_strategy="no",
        report_to=[],
        disable_tqdm=True,
        use_cpu=True,
        bf16=bool(spec.get("bf16")),  # CPU autocast, as ours trains with --bf16 true
        seed=spec["seed"],
        dataloader_num_workers=0,
    )
    install(args.events, Seq2SeqTrainer, DataCollatorForSeq2Seq)
    trainer_class = target_grouped(Seq2SeqTrainer) if args.group_by == "target" else Seq2SeqTrainer
    trainer = trainer_class(
        model=model,
        args=training_args,
        train_dataset=train_set,
        processing_class=tokenizer,
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100),
        callbacks=[budget_callback(args.minutes * 60, [float(m) for m in args.marks.split(",") if m])],
    )
    print(
        f"MarianMTModel: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters, "
        f"{args.batch_sentences} sentences a batch grouped by {args.group_by} length, "
        f"optimizer {training_args.optim}",
        flush=True,
    )
    trainer.train()
    return 0


def translate(args) -> int:
    import torch
    from transformers import AutoTokenizer, MarianMTModel

    torch.set_num_threads(args.threads)
    tokenizer = AutoTokenizer.from_pretrained(args.bpe)
    model = MarianMTModel.from_pretrained(args.checkpoint).eval()
    sources = read_lines(args.source)
    encoded = tokenizer(sources)["input_ids"]
    order = sorted(range(len(sources)), key=lambda i: -len(encoded[i]))
    outputs: list[str] = [""] * len(sources)
    with torch.inference_mode():
        for start in range(0, len(order), args.batch_size):
            rows = order[start : start + args.batch_size]
            batch = tokenizer.pad({"input_ids": [encoded[i] for i in rows]}, return_tensors="pt")
            generated = model.generate(
                **batch,
                num_beams=args.beams,
                do_sample=False,
                length_penalty=args.length_penalty,
                max_new_tokens=batch["input_ids"].shape[1] + 50,
            )
            for row, text in zip(rows, tokenizer.batch_decode(generated, skip_special_tokens=True)):
                outputs[row] = " ".join(text.split())
    Path(args.out).write_text("".join(line + "\n" for line in outputs), encoding="utf-8")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    fit = commands.add_parser("train")
    fit.add_argument("--spec", required=True, help="the shared hyper-parameters, JSON")
    fit.add_argument("--bpe", required=True)
    fit.add_argument("--train", required=True, help="prefix of PREFIX.en / PREFIX.de")
    fit.add_argument("--out", required=True)
    fit.add_argument("--events", required=True)
    fit.add_argument("--minutes", type=float, required=True)
    fit.add_argument("--marks", default="", help="training seconds at which to save, comma-separated")
    fit.add_argument("--batch_sentences", type=int, required=True)
    fit.add_argument("--threads", type=int, default=2)
    fit.add_argument(
        "--group_by",
        choices=("source", "target"),
        default="source",
        help="group_by_length over source lengths (run_translation.py's) or target lengths",
    )
    run = commands.add_parser("translate")
    run.add_argument("--checkpoint", required=True)
    run.add_argument("--bpe", required=True)
    run.add_argument("--source", required=True)
    run.add_argument("--out", required=True)
    run.add_argument("--beams", type=int, default=4)
    run.add_argument("--length_penalty", type=float, default=0.6)
    run.add_argument("--batch_size", type=int, default=64)
    run.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    return train(args) if args.command == "train" else translate(args)


if __name__ == "__main__":
    sys.exit(main())
