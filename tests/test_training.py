"""Tests of the training recipe (issue 4): schedule, loss, accumulation, checkpoints, resume, averaging, DDP, CLI.

Everything uses tiny models (d_model 32) and a synthetic word-substitution corpus written to a temporary folder,
so the whole file runs in a few minutes on 2 CPU cores. Tests marked `slow` start subprocesses or train for some
steps; they still run in CI.
"""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from vaswani_hf import VaswaniConfig, VaswaniForConditionalGeneration
from vaswani_hf.training import (
    RECIPE_KEYS,
    RecipeError,
    WallClockCallback,
    average_checkpoints,
    get_paper_schedule,
    last_checkpoints,
    load_recipe,
    paper_learning_rate,
    read_history,
    run_training,
    save_averaged_checkpoint,
    with_fused_adam,
)

REPO = Path(__file__).resolve().parent.parent
TRAIN = REPO / "scripts" / "train.py"


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny models: one intra-op thread avoids oversubscribing the 2 shared cores; restored for other modules."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


EN = "the a man woman dog cat runs sleeps eats sees big small red blue house tree car ball near under".split()
DE = "der ein mann frau hund katze läuft schläft isst sieht groß klein rot blau haus baum auto ball nahe unter".split()


def write_corpus(folder: Path, n_train: int = 64, n_valid: int = 16, seed: int = 0) -> Path:
    """Word-for-word 'translation' (en word i -> de word i): learnable in a few dozen steps. Unique source lines."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    seen = set()
    splits = {"train": n_train, "valid": n_valid, "test": n_valid}
    for split, n in splits.items():
        src, tgt = [], []
        while len(src) < n:
            ids = [rng.randrange(len(EN)) for _ in range(rng.randint(3, 8))]
            line = " ".join(EN[i] for i in ids)
            if line in seen:
                continue
            seen.add(line)
            src.append(line)
            tgt.append(" ".join(DE[i] for i in ids))
        (folder / f"{split}.en").write_text("\n".join(src) + "\n", encoding="utf-8")
        (folder / f"{split}.de").write_text("\n".join(tgt) + "\n", encoding="utf-8")
    return folder


TINY = {
    "data_format": "moses", "train_data": "train", "valid_data": None, "test_data": None,
    "vocab_size": 300, "d_model": 32, "d_ff": 64, "num_heads": 2, "num_encoder_layers": 1, "num_decoder_layers": 1,
    "warmup_steps": 4, "lr_multiplier": 2.0, "max_tokens_per_device": 4096, "max_sentences": 8,
    "save_every_minutes": 0.0, "keep_last": 0, "average_last": 0, "logging_steps": 1, "eval_steps": 0,
    "translate_examples": [], "disable_tqdm": True, "torch_threads": 1, "seed": 7,
}


def tiny_recipe(tmp_path: Path, **overrides) -> dict:
    corpus = tmp_path / "corpus"
    if not (corpus / "train.en").is_file():
        write_corpus(corpus)
    values = {**TINY, "data_dir": str(corpus), "output_dir": str(tmp_path / "run"), **overrides}
    return load_recipe("default", values)


def write_recipe_yaml(path: Path, recipe_values: dict) -> Path:
    import yaml

    path.write_text(yaml.safe_dump(recipe_values, sort_keys=False))
    return path


def losses_by_step(output_dir: Path) -> dict[int, float]:
    return {h["step"]: h["loss"] for h in read_history(Path(output_dir) / "history.jsonl") if "loss" in h}


# ---------------------------------------------------------------------------------------------------------------------
# Section 5.3: learning-rate schedule
# ---------------------------------------------------------------------------------------------------------------------


def test_paper_formula_values():
    # lrate = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), computed by hand for d_model = 512, warmup = 4000
    assert paper_learning_rate(1, 512) == pytest.approx(512 ** -0.5 * 4000 ** -1.5, rel=1e-12)
    assert paper_learning_rate(4000, 512) == pytest.approx(0.044194173824159216 * 0.015811388300841896, rel=1e-12)
    assert paper_learning_rate(16000, 512) == pytest.approx(512 ** -0.5 / 126.49110640673517, rel=1e-12)
    assert paper_learning_rate(4000, 512) == pytest.approx(6.987712429686844e-04, rel=1e-12)  # the peak
    with pytest.raises(ValueError):
        paper_learning_rate(0, 512)


@pytest.mark.parametrize("d_model,warmup,multiplier", [(512, 4000, 1.0), (1024, 4000, 1.0), (64, 10, 2.0)])
def test_schedule_equals_formula_at_each_update(d_model, warmup, multiplier):
    """The k-th optimizer update runs with lrate(step_num = k): no one-step lag (see paper_lr_lambda)."""
    param = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.Adam([param], lr=multiplier * d_model ** -0.5, betas=(0.9, 0.98), eps=1e-9)
    sched = get_paper_schedule(opt, warmup)
    checkpoints = {1, 2, 3, warmup - 1, warmup, warmup + 1, 2 * warmup, 5 * warmup}
    for k in range(1, 5 * warmup + 1):
        lr_used = opt.param_groups[0]["lr"]  # what optimizer.step() of update k uses
        if k in checkpoints:
            assert lr_used == pytest.approx(paper_learning_rate(k, d_model, warmup, multiplier), rel=1e-12), k
        opt.step()
        sched.step()


def test_trainer_uses_exact_schedule_and_adam(tmp_path):
    """Through the real Trainer: lr seen by each update, Adam hyper-parameters, no weight decay."""
    from transformers import TrainerCallback

    seen = []

    class Spy(TrainerCallback):
        def on_pre_optimizer_step(self, args, state, control, optimizer=None, **kwargs):
            group = optimizer.param_groups[0]
            seen.append((state.global_step + 1, group["lr"], group["betas"], group["eps"], group["weight_decay"],
                         type(getattr(optimizer, "optimizer", optimizer)).__name__, group["fused"]))

    r = tiny_recipe(tmp_path, max_steps=6, warmup_steps=4, lr_multiplier=1.0)
    run_training(r, callbacks=[Spy()])
    assert [s[0] for s in seen] == [1, 2, 3, 4, 5, 6]
    for step, lr, betas, eps, wd, name, fused in seen:
        assert lr == pytest.approx(paper_learning_rate(step, 32, 4), rel=1e-9)
        assert tuple(betas) == (0.9, 0.98) and eps == 1e-9 and wd == 0.0 and name == "Adam"
        assert fused is True  # CPU parameters: torch's fused kernel, not its per-parameter loop
    logged = {h["step"]: h["learning_rate"] for h in read_history(Path(r["output_dir"]) / "history.jsonl")
              if "learning_rate" in h}
    assert logged[1] == pytest.approx(paper_learning_rate(1, 32, 4), rel=1e-6)  # the log shows the lr used


def test_fused_adam_matches_default_adam():
    """`fused=True` (what the Trainer gets on CPU / CUDA) makes the same updates as torch's default Adam.

    Ten updates of the paper's Adam(0.9, 0.98, 1e-9) at lr 1e-3 on the same gradients: the two implementations
    differ only in float rounding of the same formula, so the weights agree to 1e-6 (an update is ~1e-3 per
    weight; a wrong bias correction or epsilon placement would show at that size).
    """
    torch.manual_seed(0)
    config = VaswaniConfig(vocab_size=40, d_model=16, d_ff=32, num_heads=2, num_encoder_layers=1,
                           num_decoder_layers=1, dropout=0.0)
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


# ---------------------------------------------------------------------------------------------------------------------
# Section 5.4: label smoothing
# ---------------------------------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------------------------------
# Gradient accumulation == large batch (plain Seq2SeqTrainer, as in the transformers guide)
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


# ---------------------------------------------------------------------------------------------------------------------
# A plain Seq2SeqTrainer + DataCollatorForSeq2Seq (none of our subclasses) trains and evaluates with generate
# ---------------------------------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------------------------------
# Checkpoints: time interval, atomic writes, resume, averaging (Section 6.1)
# ---------------------------------------------------------------------------------------------------------------------


def test_time_interval_checkpoint_callback(monkeypatch):
    from transformers import TrainerControl, TrainerState, TrainingArguments

    clock = [1000.0]
    monkeypatch.setattr("vaswani_hf.training.time.monotonic", lambda: clock[0])
    cb = WallClockCallback(save_every_minutes=10, max_train_minutes=25)
    args = TrainingArguments(output_dir="unused", use_cpu=True, report_to=[])
    state, control = TrainerState(), TrainerControl()
    state.max_steps = 10 ** 6
    cb.on_train_begin(args, state, control)
    decisions = []
    for minute in range(1, 31):
        clock[0] = 1000.0 + 60 * minute
        state.global_step = minute
        control = TrainerControl()
        cb.on_step_end(args, state, control)
        if control.should_save:
            cb.on_save(args, state, control)
        decisions.append((minute, control.should_save, control.should_training_stop))
        if control.should_training_stop:
            break
    saves = [m for m, s, _ in decisions if s]
    assert saves == [10, 20, 25] and decisions[-1] == (25, True, True)


@pytest.mark.slow
def test_resume_reproduces_uninterrupted_run(tmp_path):
    """12 updates straight vs 10 updates + resume (mid-epoch 1: 8 batches per epoch): identical losses, with dropout
    on (RNG states restored) and a shuffled batch order (sampler epoch and position restored). An interrupted,
    incomplete save in `.staging` is ignored."""
    common = dict(dropout=0.1, save_steps=5, keep_last=2)
    full = tiny_recipe(tmp_path, max_steps=12, output_dir=str(tmp_path / "full"), **common)
    run_training(full)
    part = tiny_recipe(tmp_path, max_steps=10, output_dir=str(tmp_path / "part"), **common)
    run_training(part)
    out = Path(part["output_dir"])
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-10", "checkpoint-5"]
    assert not (out / ".staging").exists()
    staged = out / ".staging" / "checkpoint-11"  # what a crash during a save leaves behind
    staged.mkdir(parents=True)
    (staged / "model.safetensors").write_bytes(b"truncated")
    resumed = tiny_recipe(tmp_path, max_steps=12, output_dir=str(out), resume=True, **common)
    run_training(resumed)
    a, b = losses_by_step(tmp_path / "full"), losses_by_step(out)
    assert sorted(a) == list(range(1, 13)) and sorted(b) == list(range(1, 13))
    for step in range(1, 13):
        assert b[step] == pytest.approx(a[step], rel=1e-6, abs=1e-7), (step, a[step], b[step])
    # keep-last-K rotation
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-10", "checkpoint-12"]


def _save_random_model(folder: Path, seed: int):
    torch.manual_seed(seed)
    config = VaswaniConfig(vocab_size=50, d_model=16, d_ff=32, num_heads=2, num_encoder_layers=1,
                           num_decoder_layers=1)
    model = VaswaniForConditionalGeneration(config)
    model.save_pretrained(folder)
    return model


def test_checkpoint_averaging_equals_mean_of_weights(tmp_path):
    from safetensors.torch import load_file
    from transformers import AutoModelForSeq2SeqLM

    models = [_save_random_model(tmp_path / f"checkpoint-{s}", s) for s in (100, 200, 300)]
    folders = last_checkpoints(tmp_path, 3)
    assert [f.name for f in folders] == ["checkpoint-100", "checkpoint-200", "checkpoint-300"]
    averaged = average_checkpoints(folders)
    for name, value in averaged.items():
        stack = torch.stack([load_file(str(f / "model.safetensors"))[name].double() for f in folders])
        torch.testing.assert_close(value.double(), stack.mean(0), rtol=0, atol=1e-7)
    # the written folder loads with from_pretrained and holds the mean of every parameter (tied ones included)
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import average_checkpoints as cli  # scripts/average_checkpoints.py
    finally:
        sys.path.pop(0)
    assert cli.main(["--run_dir", str(tmp_path), "--last", "3", "--out", str(tmp_path / "avg")]) == 0
    loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "avg")
    params = [dict(m.named_parameters()) for m in models]
    for name, p in loaded.named_parameters():
        mean = torch.stack([q[name].detach().double() for q in params]).mean(0)
        torch.testing.assert_close(p.detach().double(), mean, rtol=0, atol=1e-6, msg=name)
    assert loaded.lm_head.weight.data_ptr() == loaded.model.shared.weight.data_ptr()  # still tied


# ---------------------------------------------------------------------------------------------------------------------
# Recipes and the command line
# ---------------------------------------------------------------------------------------------------------------------


def test_bundled_recipes_load_and_have_the_paper_settings():
    base = load_recipe("wmt14-en-de-base", check_paths=False)
    big = load_recipe("wmt14-en-de-big", check_paths=False)
    fr = load_recipe("wmt14-en-fr-big", check_paths=False)
    for r in (base, big, fr):
        assert (r["adam_beta1"], r["adam_beta2"], r["adam_epsilon"], r["warmup_steps"]) == (0.9, 0.98, 1e-9, 4000)
        assert r["hub_dataset"] == "wmt14" and r["label_smoothing"] == 0.1 and r["weight_decay"] == 0.0
        assert r["tokens_per_step"] == 25000 and r["gradient_accumulation_steps"] == "auto"
        assert r["save_every_minutes"] == 10.0 and r["keep_last"] >= r["average_last"]
    assert (base["max_steps"], base["dropout"], base["average_last"], base["vocab_size"]) == (100000, 0.1, 5, 37000)
    assert (big["max_steps"], big["dropout"], big["average_last"], big["d_model"]) == (300000, 0.3, 20, 1024)
    assert (fr["max_steps"], fr["dropout"], fr["average_last"], fr["vocab_size"]) == (300000, 0.1, 20, 32000)
    assert fr["tgt_lang"] == "fr" and fr["hub_config"] == "fr-en"
    from vaswani_hf.training import _gradient_accumulation

    assert [_gradient_accumulation(base, w) for w in (1, 2, 8)] == [8, 4, 1]  # 25000 tokens per update
    m30k = load_recipe("multi30k-en-de")  # data found relative to the repository
    assert m30k["bleu_tokenize"] == "none" and "tok" in m30k["data_dir"]
    load_recipe("default")


def test_bf16_recipe_builds_cpu_training_arguments_without_an_accelerator(monkeypatch):
    """transformers refuses bf16=True on a machine without an accelerator unless use_cpu is set; CPU bf16 autocast
    works (and is fast on CPUs with AMX / AVX512-BF16), so a bf16 recipe must still build its arguments there."""
    import torch

    from vaswani_hf.training import build_training_arguments

    if hasattr(torch, "accelerator"):
        monkeypatch.setattr(torch.accelerator, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    args = build_training_arguments(load_recipe("default", {"bf16": True}), world_size=1)
    assert args.bf16 and args.use_cpu


def test_bad_recipe_input_errors_clearly(tmp_path):
    with pytest.raises(RecipeError, match="unknown recipe key.*'drpout'.*Valid keys: .*dropout"):
        load_recipe("default", {"drpout": 0.2})
    with pytest.raises(RecipeError, match="d_model must be int, got 'wide'"):
        load_recipe("default", {"d_model": "wide"})
    with pytest.raises(RecipeError, match="max_steps must be int"):
        load_recipe("default", {"max_steps": 1.5})
    with pytest.raises(RecipeError, match="corpus file not found: .*missing.en"):
        load_recipe("default", {"data_format": "moses", "data_dir": str(tmp_path), "train_data": "missing"})
    with pytest.raises(RecipeError, match="data_dir not found"):
        load_recipe("multi30k-en-de", {"data_dir": str(tmp_path / "nowhere")})
    bad_yaml = write_recipe_yaml(tmp_path / "bad.yaml", {"d_model": 64, "nonsense": 1})
    with pytest.raises(RecipeError, match="unknown recipe key.*'nonsense'"):
        load_recipe(bad_yaml)
    with pytest.raises(RecipeError, match="keep_last"):
        load_recipe("default", {"keep_last": 2, "average_last": 5})


@pytest.mark.slow
def test_cli_rejects_bad_input_before_training(tmp_path):
    out = tmp_path / "never"
    cases = [
        (["--drpout", "0.3"], "unknown option --drpout. Valid recipe keys:"),
        (["--max_steps", "many"], "max_steps"),
        (["--recipe", "multi30k-en-de", "--data_dir", str(tmp_path / "nope")], "data_dir not found"),
    ]
    for extra, message in cases:
        proc = subprocess.run([sys.executable, str(TRAIN), "--output_dir", str(out), *extra], capture_output=True,
                              text=True, timeout=120, cwd=tmp_path)
        assert proc.returncode == 2, proc.stderr
        assert message in proc.stderr and "Traceback" not in proc.stderr
        assert not out.exists()  # nothing was started


# ---------------------------------------------------------------------------------------------------------------------
# End to end: the default recipe, and two processes over gloo
# ---------------------------------------------------------------------------------------------------------------------


def _env():
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1")
    env.pop("ACCELERATE_USE_CPU", None)
    return env


@pytest.mark.slow
def test_default_recipe_end_to_end(tmp_path):
    """`python scripts/train.py` (the default recipe, shortened) trains, the loss falls, it averages, evaluates,
    translates and exports a Hub folder."""
    out = tmp_path / "default"
    proc = subprocess.run(
        [sys.executable, str(TRAIN), "--output_dir", str(out), "--max_steps", "150", "--save_steps", "50",
         "--eval_steps", "0", "--logging_steps", "10", "--disable_tqdm", "true", "--torch_threads", "1"],
        capture_output=True, text=True, timeout=600, env=_env(), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["last_logged_loss"] < metrics["first_logged_loss"] - 1.0, metrics
    assert metrics["averaged_checkpoints"] == ["checkpoint-50", "checkpoint-100", "checkpoint-150"]
    assert "test/bleu" in metrics and "valid/loss" in metrics
    assert "Translations:" in proc.stdout and "->" in proc.stdout
    hub = out / "hub"
    for name in ("model.safetensors", "config.json", "generation_config.json", "modeling_vaswani.py",
                 "configuration_vaswani.py", "beam_search_vaswani.py", "tokenizer.json", "README.md", "loss.png",
                 "learning_rate.png", "training_metrics.json"):
        assert (hub / name).is_file(), name
    config = json.loads((hub / "config.json").read_text())
    assert "auto_map" in config and "translation" in config["custom_pipelines"]
    for name in ("pipeline_vaswani.py", "handler.py"):
        assert (hub / name).is_file(), name
    generation = json.loads((hub / "generation_config.json").read_text())
    paper = (generation["num_beams"], generation["length_penalty_type"], generation.get("max_length"))
    assert paper == (4, "gnmt", None)  # not Seq2SeqTrainer's evaluation defaults
    from huggingface_hub import ModelCard

    card = ModelCard.load(hub / "README.md")  # the card carries this run's real test score and its signature
    results = card.data.eval_results
    bleu = next(r for r in results if r.metric_type == "sacrebleu")
    assert bleu.metric_value == pytest.approx(metrics["test/bleu"], abs=0.01)
    assert "tok:13a" in card.text and "version:" in card.text


@pytest.mark.slow
def test_two_cpu_processes_match_one_process(tmp_path):
    """`ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu --num_processes 2` is real DDP over gloo (world size 2,
    two ranks writing), the two ranks see disjoint batches, and with the same global batch (1 process x 2
    accumulation steps == 2 processes x 1) the first losses match a single-process run.

    Tolerance: with dropout 0 both runs compute the same sums over the same examples; only the order of float32
    additions differs (all-reduce of gradients, gather of token counts), ~1e-7 relative per operation. Step 1 runs
    before any update, so it must agree to 1e-5; steps 2-3 come after Adam updates of size ~lr whose direction can
    flip only for gradient entries that are ~0 anyway, so 1e-3 relative is ample and still catches any wrong
    normalisation (a factor of 2 from world size or accumulation would be off by ~30% in the loss).

    `max_sentences: 4` gives 16 equal batches, so the 1-process and 2-process runs have the same global batches and
    their losses can be compared step by step; the launch paths users run, with the recipes' own batching, are
    tests/test_distributed.py."""
    corpus = write_corpus(tmp_path / "corpus", n_train=64)
    values = {**TINY, "data_dir": str(corpus), "dropout": 0.0, "max_steps": 3, "debug_log_batches": True,
              "max_sentences": 4, "save_every_minutes": 60.0,  # exercises the rank-0 broadcast of save decisions
              "valid_data": "valid"}
    recipe = write_recipe_yaml(tmp_path / "ddp.yaml", values)
    env = _env()
    single = subprocess.run(
        [sys.executable, str(TRAIN), "--recipe", str(recipe), "--output_dir", str(tmp_path / "one"),
         "--gradient_accumulation_steps", "2"], capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert single.returncode == 0, single.stdout[-3000:] + single.stderr[-3000:]
    ddp_env = dict(env, ACCELERATE_USE_CPU="1")
    ddp = subprocess.run(
        [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
         "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "29533",
         str(TRAIN), "--recipe", str(recipe), "--output_dir", str(tmp_path / "two"),
         "--gradient_accumulation_steps", "1"], capture_output=True, text=True, timeout=600, env=ddp_env, cwd=tmp_path)
    assert ddp.returncode == 0, ddp.stdout[-3000:] + ddp.stderr[-3000:]

    info = [json.loads((tmp_path / "two" / f"run_info_rank{r}.json").read_text()) for r in (0, 1)]
    assert [i["world_size"] for i in info] == [2, 2] and [i["process_index"] for i in info] == [0, 1]
    assert all("MULTI_CPU" in i["distributed_type"] for i in info)
    assert json.loads((tmp_path / "one" / "run_info_rank0.json").read_text())["world_size"] == 1
    # The final validation loss is per target token over both ranks' shards (loss sums and token counts summed across
    # processes), so it equals the single process's; rank 0's shard alone gives 4.68 against 4.64.
    m_one, m_two = (json.loads((tmp_path / d / "metrics.json").read_text()) for d in ("one", "two"))
    assert m_two["valid/loss"] == pytest.approx(m_one["valid/loss"], rel=1e-3), (m_one, m_two)

    one, two = losses_by_step(tmp_path / "one"), losses_by_step(tmp_path / "two")
    assert sorted(one) == sorted(two) == [1, 2, 3]
    assert two[1] == pytest.approx(one[1], rel=1e-5)
    for step in (2, 3):
        assert two[step] == pytest.approx(one[step], rel=1e-3), (step, one[step], two[step])

    def batches(path):
        return [json.loads(x)["examples"] for x in path.read_text().splitlines()]

    rank0, rank1 = (batches(tmp_path / "two" / f"batches_rank{r}.jsonl")[:3] for r in (0, 1))
    seen = [e for b in rank0 + rank1 for e in b]
    assert len(seen) == len(set(seen)), "an example was seen twice within the first epoch"
    single_batches = batches(tmp_path / "one" / "batches_rank0.jsonl")[:6]
    # global step k = micro-batches 2k-1, 2k of the single run = batch k of rank 0 and batch k of rank 1
    for k in range(3):
        assert sorted(single_batches[2 * k] + single_batches[2 * k + 1]) == sorted(rank0[k] + rank1[k])

    # The end-of-training samples' rate counts the sentences of all processes (not steps x per_device batch size)
    def sentences_trained(path):
        end = [json.loads(x) for x in (path / "history.jsonl").read_text().splitlines() if "train_runtime" in x]
        return end[-1]["train_samples_per_second"] * end[-1]["train_runtime"]

    assert sentences_trained(tmp_path / "two") == pytest.approx(len(seen), rel=1e-2)
    assert sentences_trained(tmp_path / "one") == pytest.approx(sum(map(len, single_batches)), rel=1e-2)
