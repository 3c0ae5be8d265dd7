"""The three systems of the peer benchmark: how each is trained (a command line, in its own environment) and how
its checkpoints translate the validation set. The shared hyper-parameters (`spec`) come from our multi30k-en-de
recipe; where a peer cannot match them, `DIFFERENCES` says so and the report prints it.

- ours: `scripts/train.py --recipe multi30k-en-de` (through `peer_ours.py`, the same code with a phase clock); only
  the overrides the comparison needs (`ours_command` lists them).
- eole: `eole train` with a config written here (`eole_config`): token batches, noam schedule, Adam, label
  smoothing, shared embeddings, on the same subword pieces. Decoding: `eole predict`.
- marian: `peer_marian.py`, the run_translation.py path (Seq2SeqTrainer + DataCollatorForSeq2Seq +
  group_by_length) with a MarianMTModel of the same sizes, on the same tokenizer.
- marian-target: the same path grouped by target length (its maintainers' choice for a seq2seq model: the cost
  and the padding that matter are the target's), in the same environment as marian.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml
from peer_data import SharedData, pieces_to_text

HERE = Path(__file__).resolve().parent
SYSTEMS = ("ours", "eole", "marian", "marian-target")
PEERS = SYSTEMS[1:]
VENV = {"eole": "eole", "marian": "marian", "marian-target": "marian"}  # the peer environment each system runs in
LABELS = {
    "ours": "ours (scripts/train.py --recipe multi30k-en-de)",
    "eole": "eole (token batches, noam, pre-norm)",
    "marian": "Seq2SeqTrainer + MarianMTModel, group_by_length (source lengths)",
    "marian-target": "Seq2SeqTrainer + MarianMTModel, group_by_length over target lengths",
}
SPEC_KEYS = (
    "d_model",
    "d_ff",
    "num_heads",
    "num_encoder_layers",
    "num_decoder_layers",
    "dropout",
    "label_smoothing",
    "warmup_steps",
    "adam_beta1",
    "adam_beta2",
    "adam_epsilon",
    "max_length",
    "seed",
    "logging_steps",
)
DIFFERENCES = {
    "ours": "the recipe: post-norm, interleaved sinusoids, one shared embedding x sqrt(d_model), attention without "
    "biases, t2t initialisation, LayerNorm epsilon 1e-6, dropout 0.3 on sub-layer outputs and embeddings "
    "only (none inside the feed-forward, none on attention weights: t2t v1), `</s>` at the end of the "
    "source, label smoothing eps/(V-1), fused Adam, batches of <= 1,024 padded source and target tokens",
    "eole": "dropout 0.3 also inside the feed-forward (after its ReLU: eole's `dropout` covers both), source "
    "without `</s>` (eole appends none by default), "
    "pre-norm with a final LayerNorm (eole's decoder has no post-norm layer; `encoder_layer_style: postnorm` "
    "exists for the encoder only, so the standard pre-norm model is used on both sides), a bias on the "
    "output projection, decoding starts from <s>, xavier_uniform initialisation; batches: sentences x longest "
    "side <= 1,024 tokens; one bucket = one epoch (bucket_size = training pairs; eole's default 262,144 "
    "would read Multi30k 9 times before the first batch). The settings a maintainer would pick on this CPU "
    "(benchmarks/results/peers_eole_settings.md, single 3-minute runs): `use_amp: false`, so that eole "
    "builds optimi's Adam rather than torch's single-tensor one (+4% in one run), `num_workers: 0` (speed "
    "within noise, 0.3 GiB less memory); `torch_compile` fails at eole 0.6.4's first checkpoint save "
    "(shared embeddings under `_orig_mod.`)",
    "marian": "post-norm, concatenated sinusoids, attention projections with biases, final_logits_bias, "
    "transformers' Marian initialisation (normal, std 0.02; embeddings too), LayerNorm epsilon 1e-5, "
    "transformers' LabelSmoother (eps over all V classes), default fused AdamW (weight decay 0), "
    "inverse_sqrt schedule = the paper's curve one step late; a fixed number of sentences per batch "
    "(1,024 / the mean target length) grouped by source length (group_by_length's mega-batches over "
    "input_ids, run_translation.py's grouping)",
}
_SOURCE_GROUPING = (
    "grouped by source length (group_by_length's mega-batches over input_ids, run_translation.py's grouping)"
)
assert _SOURCE_GROUPING in DIFFERENCES["marian"]  # the target-grouped system's text is derived from it
DIFFERENCES["marian-target"] = DIFFERENCES["marian"].replace(
    _SOURCE_GROUPING,
    "grouped by target length (the same mega-batches over the labels' lengths: `length_column_name` is the "
    "documented way, but transformers 5.24 removes that column before the sampler reads it, so peer_marian.py "
    "hands the lengths to the sampler itself)",
)


# --model_size: the Multi30k recipe's 6M model, or the paper's base sizes (Table 3) on the same data and recipe
MODEL_SIZES = {
    "multi30k": {},
    "base": dict(d_model=512, d_ff=2048, num_heads=8, num_encoder_layers=6, num_decoder_layers=6),
}
MODEL_KEYS = ("d_model", "d_ff", "num_heads", "num_encoder_layers", "num_decoder_layers")


def spec_from_recipe(max_tokens: int, model_size: str = "multi30k", bf16: bool = False) -> dict:
    """The shared hyper-parameters: the multi30k-en-de recipe's, at `model_size`; `bf16`: every system trains in
    bf16 mixed precision (ours --bf16 true, Marian's Trainer bf16, eole's compute_dtype bf16 with amp)."""
    from vaswani_hf.training.recipe import load_recipe

    recipe = load_recipe("multi30k-en-de").flat()
    spec = {key: recipe[key] for key in SPEC_KEYS}
    spec.update(MODEL_SIZES[model_size], max_tokens=max_tokens, bf16=bf16)
    return spec


# ---------------------------------------------------------------------------------------------------------------------
# Training command lines
# ---------------------------------------------------------------------------------------------------------------------


def ours_command(
    shared: SharedData, out: Path, events: Path, minutes: float, save_every: float, threads: int, spec: dict
) -> list[str]:
    """scripts/train.py's command line: the recipe, plus the data and tokenizer every system shares, the budget, a
    checkpoint every `save_every` minutes kept (no averaging), no validation during training (scored afterwards,
    outside the budget, like every system's), the thread count, the model's sizes and precision."""
    overrides = {
        **{key: spec[key] for key in MODEL_KEYS},
        "bf16": str(bool(spec.get("bf16"))).lower(),
        "output_dir": out / "model",
        "data_format": "moses",
        "data_dir": shared.folder,
        "train_data": "train",
        "valid_data": "null",
        "test_data": "null",
        "tokenizer_path": shared.bpe_dir,
        "max_train_minutes": minutes,
        "max_steps": 10**7,
        "save_every_minutes": save_every,
        "keep_last": 0,
        "average_last": 0,
        "eval_steps": 0,
        "torch_threads": threads,
        "disable_tqdm": "true",
        "translate_examples": "[]",
        "max_tokens_per_device": spec["max_tokens"],
    }
    argv = [sys.executable, str(HERE / "peer_ours.py"), str(events), "--recipe", "multi30k-en-de"]
    for key, value in overrides.items():
        argv += [f"--{key}", str(value)]
    return argv


def eole_config(spec: dict, shared: SharedData, model_dir: Path, overrides: dict) -> dict:
    """eole 0.6's YAML for the shared model and recipe (noam with learning_rate 1.0 is Section 5.3's formula)."""
    config = {
        "seed": spec["seed"],
        "report_every": spec["logging_steps"],
        "overwrite": True,
        "n_sample": 0,
        "src_vocab": shared.piece_vocab,
        "tgt_vocab": shared.piece_vocab,
        "share_vocab": True,
        "src_vocab_size": shared.vocab_size,
        "tgt_vocab_size": shared.vocab_size,
        "vocab_size_multiple": 8,
        "src_words_min_frequency": 0,
        "tgt_words_min_frequency": 0,
        "data": {
            "corpus_1": {
                "path_src": f"{shared.train_pieces}.en",
                "path_tgt": f"{shared.train_pieces}.de",
                "transforms": [],
            }
        },
        "training": {
            "model_path": str(model_dir),
            "keep_checkpoint": -1,
            "save_checkpoint_steps": 0,
            "train_steps": 10**7,
            "valid_steps": 10**7,
            "batch_type": "tokens",
            "batch_size": spec["max_tokens"],
            "bucket_size": shared.train_pairs,
            "num_workers": 0,
            "world_size": 1,
            "gpu_ranks": [],
            "use_amp": bool(spec.get("bf16")),  # eole's mixed precision, in compute_dtype below
            "optim": "adam",
            "adam_beta1": spec["adam_beta1"],
            "adam_beta2": spec["adam_beta2"],
            "adam_eps": spec["adam_epsilon"],
            "learning_rate": 1.0,
            "decay_method": "noam",
            "warmup_steps": spec["warmup_steps"],
            "max_grad_norm": 0,
            "label_smoothing": spec["label_smoothing"],
            "dropout": [spec["dropout"]],
            "attention_dropout": [0.0],
            "dropout_steps": [0],
            "param_init_method": "xavier_uniform",
            "normalization": "tokens",
            "compute_dtype": "bf16" if spec.get("bf16") else "fp32",
        },
        "model": {
            "architecture": "transformer",
            "hidden_size": spec["d_model"],
            "heads": spec["num_heads"],
            "transformer_ff": spec["d_ff"],
            "add_ffnbias": True,
            "norm_eps": 1e-6,
            "share_embeddings": True,
            "share_decoder_embeddings": True,
            "encoder": {"encoder_type": "transformer", "layers": spec["num_encoder_layers"]},
            "decoder": {"decoder_type": "transformer", "layers": spec["num_decoder_layers"]},
            "embeddings": {"word_vec_size": spec["d_model"], "position_encoding_type": "SinusoidalInterleaved"},
        },
    }
    for dotted, value in overrides.items():  # --eole_set training.num_workers=0
        node = config
        *path, last = dotted.split(".")
        for part in path:
            node = node.setdefault(part, {})
        node[last] = value
    return config


def eole_command(
    python: Path, config_path: Path, events: Path, minutes: float, marks: list[float], threads: int
) -> list[str]:
    return [
        str(python),
        str(HERE / "peer_eole.py"),
        "--events",
        str(events),
        "--minutes",
        str(minutes),
        "--marks",
        ",".join(f"{m:.1f}" for m in marks),
        "--threads",
        str(threads),
        "--",
        "-config",
        str(config_path),
    ]


def marian_command(
    python: Path,
    spec: dict,
    shared: SharedData,
    out: Path,
    events: Path,
    minutes: float,
    marks: list[float],
    threads: int,
    group_by: str = "source",
) -> list[str]:
    sentences = max(1, round(spec["max_tokens"] / shared.mean_target_tokens))
    return [
        str(python),
        str(HERE / "peer_marian.py"),
        "train",
        "--spec",
        json.dumps(spec),
        "--bpe",
        shared.bpe_dir,
        "--train",
        shared.train,
        "--out",
        str(out / "model"),
        "--events",
        str(events),
        "--minutes",
        str(minutes),
        "--marks",
        ",".join(f"{m:.1f}" for m in marks),
        "--batch_sentences",
        str(sentences),
        "--threads",
        str(threads),
        "--group_by",
        group_by,
    ]


def write_eole_config(spec: dict, shared: SharedData, out: Path, overrides: dict) -> Path:
    path = out / "eole.yaml"
    path.write_text(
        yaml.safe_dump(eole_config(spec, shared, out / "model", overrides), sort_keys=False), encoding="utf-8"
    )
    return path


# ---------------------------------------------------------------------------------------------------------------------
# Decoding the validation set with a checkpoint (greedy: beams 1; beam search: 4 with a length penalty of 0.6)
# ---------------------------------------------------------------------------------------------------------------------


def translate_ours(checkpoint: str, shared: SharedData, beams: int, threads: int) -> list[str]:
    """Our generate() with the model's generation config (beam 4: GNMT alpha 0.6, input length + 50)."""
    import torch
    from transformers import AutoModelForSeq2SeqLM

    import vaswani_hf  # noqa: F401 - registers the classes with the Auto classes
    from vaswani_hf.io import read_lines
    from vaswani_hf.tokenization import load_tokenizer
    from vaswani_hf.translation.inference import translate

    torch.set_num_threads(threads)
    model = AutoModelForSeq2SeqLM.from_pretrained(checkpoint).eval()
    return translate(
        model,
        load_tokenizer(shared.bpe_dir),
        read_lines(f"{shared.valid}.en"),
        num_beams=beams,
        batch_size=64,
        progress=False,
    )


def translate_eole(python: Path, checkpoint: str, shared: SharedData, beams: int, out: Path, env: dict) -> list[str]:
    """`eole predict` on the pieces file (GNMT length penalty "wu", alpha 0.6), decoded by our tokenizer."""
    hyp = out / f"{Path(checkpoint).name}.beam{beams}.pieces"
    eole = Path(python).parent / "eole"
    done = subprocess.run(
        [
            str(eole),
            "predict",
            "-model_path",
            checkpoint,
            "-src",
            f"{shared.valid_pieces}.en",
            "-output",
            str(hyp),
            "-beam_size",
            str(beams),
            "-batch_size",
            "64",
            "-batch_type",
            "sents",
            "-length_penalty",
            "wu",
            "-alpha",
            "0.6",
            "-max_length",
            "250",
        ],
        check=False,
        env=env,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise RuntimeError(f"eole predict failed ({done.returncode}): {done.stderr[-2000:]}")
    return pieces_to_text(hyp.read_text(encoding="utf-8").splitlines(), shared.bpe_dir)


def translate_marian(
    python: Path, checkpoint: str, shared: SharedData, beams: int, out: Path, env: dict, threads: int
) -> list[str]:
    """MarianMTModel.generate (beam 4: length_penalty 0.6 on |Y|, transformers' scoring), max input + 50 tokens."""
    hyp = out / f"{Path(checkpoint).name}.beam{beams}.txt"
    done = subprocess.run(
        [
            str(python),
            str(HERE / "peer_marian.py"),
            "translate",
            "--checkpoint",
            checkpoint,
            "--bpe",
            shared.bpe_dir,
            "--source",
            f"{shared.valid}.en",
            "--out",
            str(hyp),
            "--beams",
            str(beams),
            "--threads",
            str(threads),
        ],
        check=False,
        env=env,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise RuntimeError(f"peer_marian.py translate failed ({done.returncode}): {done.stderr[-2000:]}")
    return hyp.read_text(encoding="utf-8").splitlines()
