#!/usr/bin/env python
"""Decoding speed: our `VaswaniForConditionalGeneration` vs transformers' `MarianMTModel` with IDENTICAL weights.

Not a test. Multi30k test_2016_flickr EN->DE sources (read from the shared data folder, never copied into the repo),
CPU, both models in one run, the same batches (token-budget batches from `vaswani_hf.data.batching.make_batches`), the
same `generate()` arguments, measured alternately (ours, Marian, ours, Marian, ...), one torch thread. Speeds are per
second of the process's CPU time (`time.process_time`), the repetition with the least CPU time kept: on a shared
machine wall time mostly measures the other processes (wall-time ratios are reported too). Reports sentences/s and
target tokens/s and the ratios ours / Marian.

Contenders: `ours` is `generate()` as shipped (greedy and beam search run the lean loops of
`vaswani_hf/beam_search_vaswani.py`); `ours_transformers_loop` is the same model with `use_lean_decoding=False`
(transformers' own `_beam_search` / `_sample`, with the overrides of `vaswani_hf/generation_vaswani.py`); `marian` is
`MarianMTModel`.

Two modes:
- `--model_dir DIR`: a trained model folder; natural decoding (each model stops at its own </s>), which is real use
  and the headline number. The Marian copy comes from `vaswani_hf.export.marian.to_marian`. Ours keeps its per-sentence
  limit (input + 50); Marian, which has none, gets max_new_tokens = longest source of the batch + 50 (without it,
  its config's default max_length of 20 would cut long translations). `--source_file` / `--reference_file` give
  the data (e.g. the lowercased tokenized files for the `multi30k-en-de` model) and BLEU per contender.
- default: a RANDOM model of a stated size with a BPE tokenizer trained on Multi30k train (en+de). Random weights
  would decode to the maximum length, so every sentence is forced to exactly `--target_length` new tokens: equal
  work, so this measures only the per-step cost (no sentence finishes early, so the lean loops' main saving is
  absent). </s> is suppressed by a logits processor that sets its column to -inf in place (`--force_with
  suppress_eos`, for `ours_transformers_loop` and Marian) and `max_new_tokens` stops the search; `ours` gets
  `min_new_tokens` instead, which the lean loops implement in place (an unknown processor would send generate()
  back to transformers' loop). `--force_with min_new_tokens` gives all three `min_new_tokens`, i.e. transformers'
  two processors that clone and rewrite the (rows, vocab) score matrix at every step for the loops.

Decoding settings compared:
- greedy: num_beams=1.
- beam4_hf: beam 4, length penalty alpha 0.6 with transformers' |Y|^alpha for BOTH (apples to apples).
- beam4_gnmt: beam 4, alpha 0.6, ours with the paper's GNMT ((5+|Y|)/6)^alpha vs Marian with |Y|^alpha (Marian has
  no GNMT option): informational; with forced lengths the work is the same, only the scoring code differs.
- beam4_default_stopping: each tool at its default stopping rule, beam 4, alpha 0.6: ours as shipped (GNMT penalty, the
  paper's search: a sentence ends once no running beam can beat its worst finished one, `early_stopping="never"`),
  Marian with transformers' default `early_stopping=False` (a heuristic that stops once k beams have finished and
  the best running score, at the current length, cannot beat them: less work, a different search). Trained models
  only (`--model_dir`): with forced lengths every beam ends at the limit, whatever the rule.
Ours decodes with `max_length_b=None` (no per-sentence "input + 50" limit) in the forced-length mode, as Marian has
no such limit; in `--model_dir` mode it keeps the model's default (the limit is active, as in real use).

    python benchmarks/bench_decoding.py                          # random model, ~3-5 min on 1 CPU thread
    python benchmarks/bench_decoding.py --device cuda --batch_size 256 --max_tokens 65536   # on a GPU

On a GPU (`--device cuda`) the primary clock is the wall time with the device synchronised (a process's CPU time
measures only the thread that launches the kernels); the result keys keep their names (`cpu_seconds`, `sentences_per_s`)
and the report's `hardware.clock` says which clock they hold.
    python benchmarks/bench_decoding.py --model_dir outputs/bench-multi30k/hub \
        --source_file ../shared/data/multi30k/tok/test_2016_flickr.lc.norm.tok.en \
        --reference_file ../shared/data/multi30k/tok/test_2016_flickr.lc.norm.tok.de   # trained model (headline)
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch
from transformers import LogitsProcessor, LogitsProcessorList

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data" / "multi30k" / "raw"


SETTING_NAMES = ("greedy", "beam4_hf", "beam4_gnmt", "beam4_default_stopping")  # `main`'s settings table


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model_dir", default=None, help="trained model folder (default: random model, forced lengths)")
    p.add_argument("--data_dir", default=str(DEFAULT_DATA), help="Multi30k raw folder (test_2016_flickr.en, train.*)")
    p.add_argument(
        "--source_file",
        default=None,
        help="source sentences (default: DATA_DIR/test_2016_flickr.en; a model trained on the lowercased "
        "tokenized files wants tok/test_2016_flickr.lc.norm.tok.en)",
    )
    p.add_argument(
        "--reference_file",
        default=None,
        help="trained model: references for BLEU (sacreBLEU tokenize=none on the decoded text)",
    )
    p.add_argument("--num_sentences", type=int, default=1000, help="first N sentences of the source file")
    p.add_argument("--max_tokens", type=int, default=1024, help="padded source tokens per batch (both models)")
    p.add_argument("--batch_size", type=int, default=64, help="at most this many sentences per batch (both models)")
    p.add_argument(
        "--target_length",
        type=int,
        default=16,
        help="random model: new tokens forced per sentence (Multi30k German references: ~16 BPE tokens)",
    )
    p.add_argument("--vocab_size", type=int, default=8000, help="random model: BPE vocabulary trained on Multi30k")
    p.add_argument("--d_model", type=int, default=256)
    p.add_argument("--d_ff", type=int, default=1024)
    p.add_argument("--num_heads", type=int, default=4)
    p.add_argument("--num_layers", type=int, default=3, help="random model: encoder and decoder layers each")
    p.add_argument("--repeats", type=int, default=2, help="timed repetitions per model and setting (best kept)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (1: least sensitive to a loaded machine)")
    p.add_argument("--device", default="cpu", help="cpu or cuda: where both models decode")
    p.add_argument("--settings", default="greedy,beam4_hf,beam4_gnmt")
    p.add_argument(
        "--force_with",
        choices=("suppress_eos", "min_new_tokens"),
        default="suppress_eos",
        help="random model: how the target length is forced (see the module docstring)",
    )
    p.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "decoding"), help="output path stem")
    args = p.parse_args(argv)
    unknown = [name for name in args.settings.split(",") if name not in SETTING_NAMES]
    if unknown:
        p.error(f"--settings: unknown {', '.join(unknown)}; choose from {', '.join(SETTING_NAMES)}")
    if not args.model_dir and args.settings.split(",") == ["beam4_default_stopping"]:
        p.error("--settings beam4_default_stopping needs --model_dir (with forced lengths no stopping rule differs)")
    for name in ("threads", "repeats", "batch_size", "max_tokens", "num_sentences"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    if Path(args.out).parent.exists() and not Path(args.out).parent.is_dir():
        p.error(f"--out {args.out}: {Path(args.out).parent} is not a folder")
    return args


def build_random(args, data_dir: Path):
    from vaswani_hf import VaswaniConfig, VaswaniForConditionalGeneration
    from vaswani_hf.tokenization import train_bpe_tokenizer

    tokenizer = train_bpe_tokenizer(
        [str(data_dir / "train.en"), str(data_dir / "train.de")], vocab_size=args.vocab_size, show_progress=False
    )
    torch.manual_seed(0)
    config = VaswaniConfig(
        vocab_size=len(tokenizer),
        d_model=args.d_model,
        d_ff=args.d_ff,
        num_heads=args.num_heads,
        num_encoder_layers=args.num_layers,
        num_decoder_layers=args.num_layers,
    )
    return VaswaniForConditionalGeneration(config).eval(), tokenizer


class SuppressTokenInPlace(LogitsProcessor):
    """Logits processor: the token's score becomes -inf, in place (no copy of the score matrix)."""

    def __init__(self, token_id: int):
        self.token_id = token_id

    def __call__(self, input_ids, scores):
        scores[:, self.token_id] = -float("inf")
        return scores

    def __repr__(self):
        return f"SuppressTokenInPlace({self.token_id})"


class RowStepCounter:
    """Counts the rows the output projection (`lm_head`) computes, summed over decoding steps: every loop (ours,
    transformers', Marian's) calls it once per step on all its running rows, so this is the decoder's work in
    row-steps. The ratio Marian / ours says how much of the speed-up comes from computing fewer rows (sentences
    leaving the batch, one row per sentence at the first step), and CPU time per row-step how much from computing
    each row more cheaply."""

    def __init__(self, module: torch.nn.Module):
        self.count = 0
        module.register_forward_pre_hook(self)

    def __call__(self, module, args):
        hidden = args[0]  # (rows, D) or (rows, positions, D)
        self.count += hidden.numel() // hidden.shape[-1]


def generated_lengths(generated: torch.Tensor, eos_id: int) -> torch.Tensor:
    """New tokens per row up to and including the first </s> (the decoder start token excluded)."""
    new = generated[:, 1:]
    is_eos = new == eos_id
    first = torch.where(is_eos.any(-1), is_eos.float().argmax(-1) + 1, torch.full_like(new[:, 0], new.shape[1]))
    return first


def up_to_eos(ids: list[int], eos_id: int) -> list[int]:
    """The generated tokens up to and including the first </s>: what is compared between models (they pad their
    batch outputs differently after </s>)."""
    ids = ids[1:]
    return ids[: ids.index(eos_id) + 1] if eos_id in ids else ids


def run(model, batches, kwargs, eos_id, max_new_from_source: int | None = None):
    """Decode every batch; returns (CPU seconds, wall seconds, sentences, target tokens, outputs as lists, decoder
    row-steps (see `RowStepCounter`; the model's `row_steps` attribute)).

    CPU seconds (`time.process_time`, this process's CPU time) are the primary measure: on a shared machine the
    wall time mostly measures the other processes. With one torch thread, CPU time is the work done.
    `max_new_from_source` b: each batch may generate (longest source in the batch) + b tokens, the closest a model
    without a per-sentence limit (Marian) comes to ours ("input length + 50"); without it Marian would stop at its
    config's default max_length of 20 tokens."""
    outputs = []
    tokens = 0
    row_steps_start = model.row_steps.count
    on_gpu = model.device.type == "cuda"
    clock = time.perf_counter if on_gpu else time.process_time  # the primary clock (module docstring)
    if on_gpu:
        torch.cuda.synchronize(model.device)
    cpu_start, start = clock(), time.perf_counter()
    with torch.inference_mode():
        for input_ids, attention_mask in batches:
            if max_new_from_source is not None:
                kwargs = {**kwargs, "max_new_tokens": int(attention_mask.sum(-1).max()) + max_new_from_source}
            generated = model.generate(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
            tokens += int(generated_lengths(generated, eos_id).sum())
            outputs.extend(up_to_eos(row, eos_id) for row in generated.tolist())
    if on_gpu:
        torch.cuda.synchronize(model.device)
    cpu_seconds, seconds = clock() - cpu_start, time.perf_counter() - start
    return (
        cpu_seconds,
        seconds,
        sum(b[0].shape[0] for b in batches),
        tokens,
        outputs,
        model.row_steps.count - row_steps_start,
    )


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    from vaswani_hf.data.batching import make_batches
    from vaswani_hf.export.marian import to_marian
    from vaswani_hf.translation.inference import _pad, load_for_inference

    data_dir = Path(args.data_dir)
    source_path = Path(args.source_file) if args.source_file else data_dir / "test_2016_flickr.en"
    sources = source_path.read_text(encoding="utf-8").splitlines()[: args.num_sentences]
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    if args.model_dir:
        model, tokenizer = load_for_inference(args.model_dir, device="cpu")
        mode = "trained"
    else:
        model, tokenizer = build_random(args, data_dir)
        mode = "random-forced-length"
    device = torch.device(args.device)
    model = model.to(device)
    marian = to_marian(model).eval().to(device)
    model.row_steps, marian.row_steps = RowStepCounter(model.lm_head), RowStepCounter(marian.lm_head)
    setup_seconds = time.perf_counter() - t0
    config = model.config
    n_params = sum(p.numel() for p in model.parameters())
    print(
        f"{mode} model: d_model={config.d_model} d_ff={config.d_ff} heads={config.num_heads} "
        f"layers={config.num_encoder_layers}+{config.num_decoder_layers} vocab={config.vocab_size} "
        f"params={n_params / 1e6:.1f}M; setup {setup_seconds:.1f}s",
        file=sys.stderr,
    )

    encoded = tokenizer([s.strip() for s in sources])["input_ids"]
    batch_ids = make_batches([len(e) for e in encoded], args.max_tokens, args.batch_size)
    batches = [_pad([encoded[i] for i in b], tokenizer.pad_token_id, device) for b in batch_ids]
    eos = config.eos_token_id

    common = {}  # generate() options of ours_transformers_loop and Marian; `lean_common` those of ours
    if mode == "random-forced-length" and args.force_with == "min_new_tokens":
        common = dict(min_new_tokens=args.target_length, max_new_tokens=args.target_length)
    lean_common = common
    if mode == "random-forced-length" and args.force_with == "suppress_eos":
        common = dict(
            max_new_tokens=args.target_length, logits_processor=LogitsProcessorList([SuppressTokenInPlace(eos)])
        )
        # the lean loops only run with processors they implement themselves (any other processor sends generate()
        # back to transformers' loop): min_new_tokens forbids </s> in place there, the same work as the processor
        lean_common = dict(min_new_tokens=args.target_length, max_new_tokens=args.target_length)
    settings = {
        "greedy": (dict(num_beams=1), dict(num_beams=1)),
        "beam4_hf": (
            dict(num_beams=4, length_penalty=0.6, length_penalty_type="hf", early_stopping="never"),
            dict(num_beams=4, length_penalty=0.6, early_stopping="never"),
        ),
        "beam4_gnmt": (
            dict(num_beams=4, length_penalty=0.6, length_penalty_type="gnmt", early_stopping="never"),
            dict(num_beams=4, length_penalty=0.6, early_stopping="never"),
        ),
        # each tool at its own default stopping rule: ours as shipped (the paper's), Marian with transformers'
        "beam4_default_stopping": (
            dict(num_beams=4, length_penalty=0.6, length_penalty_type="gnmt", early_stopping="never"),
            dict(num_beams=4, length_penalty=0.6, early_stopping=False),
        ),
    }
    assert tuple(settings) == SETTING_NAMES  # the names parse_args accepts
    results = {}
    for name in args.settings.split(","):
        if name == "beam4_default_stopping" and mode != "trained":  # forced lengths: every beam ends at the limit
            print("beam4_default_stopping skipped: with forced lengths no stopping rule can differ (--model_dir)")
            continue
        ours_kwargs = {**lean_common, **settings[name][0]}
        loop_kwargs = {**common, **settings[name][0]}
        marian_kwargs = {**common, **settings[name][1]}
        if mode == "random-forced-length":
            ours_kwargs["max_length_b"] = loop_kwargs["max_length_b"] = None
        # ours: generate() as shipped (the lean decoding loops); ours_transformers_loop: the same model with
        # use_lean_decoding=False, i.e. transformers' own _beam_search / _sample loop (with our other speed-ups)
        contenders = [
            ("ours", model, ours_kwargs, True),
            ("ours_transformers_loop", model, loop_kwargs, False),
            ("marian", marian, marian_kwargs, None),
        ]
        marian_limit = 50 if mode == "trained" else None
        for who, m, kw, lean in contenders:  # warm-up on the first (largest) batch
            if lean is not None:
                m.use_lean_decoding = lean
            run(m, batches[:1], kw, eos, marian_limit if m is marian else None)
        best = {who: None for who, *_ in contenders}
        for _ in range(args.repeats):
            for who, m, kw, lean in contenders:
                if lean is not None:
                    m.use_lean_decoding = lean
                cpu_seconds, seconds, sentences, tokens, outputs, row_steps = run(
                    m, batches, kw, eos, marian_limit if m is marian else None
                )
                if best[who] is None or cpu_seconds < best[who]["cpu_seconds"]:
                    best[who] = dict(
                        cpu_seconds=cpu_seconds,
                        wall_seconds=seconds,
                        sentences=sentences,
                        target_tokens=tokens,
                        outputs=outputs,
                        row_steps=row_steps,
                    )
                print(
                    f"  {name:10s} {who:6s} cpu {cpu_seconds:7.2f}s wall {seconds:7.2f}s  "
                    f"{sentences / cpu_seconds:7.1f} sent/cpu-s  {tokens / cpu_seconds:8.1f} tok/cpu-s",
                    file=sys.stderr,
                )
        model.use_lean_decoding = True
        same = sum(a == b for a, b in zip(best["ours"]["outputs"], best["marian"]["outputs"]))
        entry = {}
        same_loop = sum(a == b for a, b in zip(best["ours"]["outputs"], best["ours_transformers_loop"]["outputs"]))
        entry["identical_outputs_lean_vs_transformers_loop"] = f"{same_loop}/{len(best['ours']['outputs'])}"
        if args.reference_file and mode == "trained":
            import sacrebleu

            refs = Path(args.reference_file).read_text(encoding="utf-8").splitlines()[: len(sources)]
            order = [i for b in batch_ids for i in b]
            for who in best:
                hyps = [""] * len(sources)
                for i, ids in zip(order, best[who]["outputs"]):
                    hyps[i] = tokenizer.decode(ids, skip_special_tokens=True)
                entry.setdefault("bleu", {})[who] = round(
                    sacrebleu.BLEU(tokenize="none", force=True).corpus_score(hyps, [refs]).score, 2
                )
        for who in best:
            r = best[who]
            entry[who] = dict(
                cpu_seconds=round(r["cpu_seconds"], 3),
                wall_seconds=round(r["wall_seconds"], 3),
                sentences=r["sentences"],
                target_tokens=r["target_tokens"],
                sentences_per_s=round(r["sentences"] / r["cpu_seconds"], 2),
                target_tokens_per_s=round(r["target_tokens"] / r["cpu_seconds"], 1),
                wall_sentences_per_s=round(r["sentences"] / r["wall_seconds"], 2),
                decoder_row_steps=r["row_steps"],
                cpu_ms_per_1k_row_steps=round(1e6 * r["cpu_seconds"] / max(r["row_steps"], 1), 2),
            )
        # speed ratio = (Marian's row-steps / ours) x (Marian's CPU time per row-step / ours)
        entry["row_steps_marian_over_ours"] = round(
            entry["marian"]["decoder_row_steps"] / max(entry["ours"]["decoder_row_steps"], 1), 3
        )
        entry["cost_per_row_step_marian_over_ours"] = round(
            entry["marian"]["cpu_ms_per_1k_row_steps"] / max(entry["ours"]["cpu_ms_per_1k_row_steps"], 1e-9), 3
        )
        entry["ratio_lean_over_transformers_loop"] = dict(
            sentences_per_s=round(
                entry["ours"]["sentences_per_s"] / entry["ours_transformers_loop"]["sentences_per_s"], 3
            )
        )
        entry["ratio_ours_over_marian"] = dict(
            sentences_per_s=round(entry["ours"]["sentences_per_s"] / entry["marian"]["sentences_per_s"], 3),
            target_tokens_per_s=round(
                entry["ours"]["target_tokens_per_s"] / entry["marian"]["target_tokens_per_s"], 3
            ),
            wall_sentences_per_s=round(
                entry["ours"]["wall_sentences_per_s"] / entry["marian"]["wall_sentences_per_s"], 3
            ),
        )
        entry["identical_outputs"] = f"{same}/{len(best['ours']['outputs'])}"
        entry["generate_kwargs"] = {
            who: {k: (repr(v) if k == "logits_processor" else v) for k, v in kw.items()}
            for who, _, kw, _ in contenders
        }
        results[name] = entry

    report = {
        "benchmark": "decoding speed, VaswaniForConditionalGeneration vs MarianMTModel (identical weights, to_marian)",
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "mode": mode,
        "model_dir": args.model_dir,
        "model": dict(
            d_model=config.d_model,
            d_ff=config.d_ff,
            num_heads=config.num_heads,
            num_encoder_layers=config.num_encoder_layers,
            num_decoder_layers=config.num_decoder_layers,
            vocab_size=config.vocab_size,
            parameters=n_params,
        ),
        "data": f"Multi30k test_2016_flickr.en, first {len(sources)} sentences",
        "batching": dict(max_tokens=args.max_tokens, batch_size=args.batch_size, batches=len(batches)),
        "forced_target_length": args.target_length if mode == "random-forced-length" else None,
        "force_with": args.force_with if mode == "random-forced-length" else None,
        "repeats": args.repeats,
        "hardware": dict(
            device=args.device,
            torch_threads=args.threads,
            cpu_count=os.cpu_count(),
            clock="wall time, CUDA synchronised" if device.type == "cuda" else "process CPU time",
            load_average_before=[round(x, 2) for x in load_before],
            load_average_after=[round(x, 2) for x in os.getloadavg()],
        ),
        "versions": dict(
            python=platform.python_version(),
            torch=torch.__version__,
            transformers=__import__("transformers").__version__,
        ),
        "results": results,
    }
    if not results:
        print("no setting ran: nothing written")
        return
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    out.with_suffix(".md").write_text(markdown(report), encoding="utf-8")
    print(markdown(report))
    return report


def markdown(report) -> str:
    m = report["model"]
    lines = [
        "# Decoding speed: ours vs MarianMTModel (identical weights)",
        "",
        f"- {report['date']}, {report['data']}, {report['hardware']['device']}, "
        f"{report['hardware']['torch_threads']} torch thread(s), "
        f"load average before/after {report['hardware']['load_average_before'][0]} / "
        f"{report['hardware']['load_average_after'][0]} on {report['hardware']['cpu_count']} cores (shared machine)",
        f"- mode: {report['mode']}; model d_model={m['d_model']}, d_ff={m['d_ff']}, heads={m['num_heads']}, "
        f"layers={m['num_encoder_layers']}+{m['num_decoder_layers']}, vocab={m['vocab_size']}, "
        f"{m['parameters'] / 1e6:.1f}M parameters",
        f"- batches: max_tokens={report['batching']['max_tokens']}, batch_size<={report['batching']['batch_size']}, "
        f"{report['batching']['batches']} batches, identical for both models; best of {report['repeats']} "
        "alternating repetitions",
        "- speeds are per second of this process's CPU time (time.process_time, summed over its threads): the machine "
        "is shared, so wall time mostly measures other processes; the wall-time ratio is given for reference",
    ]
    if report["hardware"].get("clock", "process CPU time") != "process CPU time":
        lines[-1] = f"- speeds are per second of {report['hardware']['clock']} (columns keep their CPU-time names)"
    if report["forced_target_length"]:
        how = (
            "min_new_tokens = max_new_tokens"
            if report.get("force_with") == "min_new_tokens"
            else "</s> suppressed in place by a logits processor, max_new_tokens"
        )
        lines.append(
            f"- random weights: every sentence forced to exactly {report['forced_target_length']} new tokens "
            f"({how}) for both models, so both do the same work"
        )
    lines += [
        "- beam4_hf: both with |Y|^0.6 (apples to apples); beam4_gnmt: ours with GNMT ((5+|Y|)/6)^0.6, Marian with "
        "|Y|^0.6 (Marian has no GNMT)",
        "",
        "- ours: `generate()` as shipped (the lean greedy / beam loops of `beam_search_vaswani.py`, where the beams of "
        "a sentence attend to one copy of its source K/V); ours (transformers loop): the same model with "
        "`use_lean_decoding=False`, i.e. transformers' `_sample` / `_beam_search` with the overrides of "
        "`generation_vaswani.py` (fast top-k, no cross-attention cache reorder) and per-row cross-attention",
        "",
        "| setting | ours sent/s | ours (transformers loop) sent/s | Marian sent/s | ours tok/s | Marian tok/s "
        "| ratio ours/Marian (sent/s) | ratio (tok/s) | ratio (wall sent/s) | identical outputs ours/Marian "
        "| identical lean/loop | BLEU ours / loop / Marian |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in report["results"].items():
        loop = r.get("ours_transformers_loop", {}).get("sentences_per_s", "-")
        bleu = r.get("bleu", {})
        bleu_cell = (
            " / ".join(str(bleu.get(w, "-")) for w in ("ours", "ours_transformers_loop", "marian")) if bleu else "-"
        )
        lines.append(
            f"| {name} | {r['ours']['sentences_per_s']} | {loop} | {r['marian']['sentences_per_s']} | "
            f"{r['ours']['target_tokens_per_s']} | {r['marian']['target_tokens_per_s']} | "
            f"{r['ratio_ours_over_marian']['sentences_per_s']} | {r['ratio_ours_over_marian']['target_tokens_per_s']} "
            f"| {r['ratio_ours_over_marian']['wall_sentences_per_s']} | {r['identical_outputs']} "
            f"| {r.get('identical_outputs_lean_vs_transformers_loop', '-')} | {bleu_cell} |"
        )
    lines += [
        "",
        "Where the ratio comes from: decoder row-steps (rows the output projection computes, summed over steps) and "
        "CPU time per row-step; ratio ours/Marian = (Marian's row-steps / ours) x (Marian's time per row-step / ours).",
        "",
        "| setting | row-steps ours | row-steps (transformers loop) | row-steps Marian | Marian / ours "
        "| CPU ms per 1k row-steps ours / loop / Marian | Marian / ours |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in report["results"].items():
        if "decoder_row_steps" not in r["ours"]:
            continue
        cost = " / ".join(str(r[w]["cpu_ms_per_1k_row_steps"]) for w in ("ours", "ours_transformers_loop", "marian"))
        loop = r["ours_transformers_loop"]["decoder_row_steps"]
        lines.append(
            f"| {name} | {r['ours']['decoder_row_steps']} | {loop} "
            f"| {r['marian']['decoder_row_steps']} | {r['row_steps_marian_over_ours']} | {cost} "
            f"| {r['cost_per_row_step_marian_over_ours']} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
