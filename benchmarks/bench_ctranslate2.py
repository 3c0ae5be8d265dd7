#!/usr/bin/env python
"""CTranslate2 export vs PyTorch decoding (issue 8). Not a test.

One run, Multi30k test_2016_flickr EN->DE sources (read from the shared data folder, never copied into the repo),
beam 4, batches of `--batch_size` sentences, CPU, each engine in its OWN subprocess (peak memory = that process's
high-water RSS, VmHWM: `ru_maxrss` survives execve and would include the parent's peak; model load and
tokenisation excluded from the timings):

- ours:          `VaswaniForConditionalGeneration.generate()`
- marian:        `MarianMTModel.generate()` with the same weights (`vaswani_hf.export.marian.to_marian`)
- ct2_fp32/int8: our export (`vaswani_hf.export.to_ctranslate2`), float32 / int8 weights
- ct2_native_fp32/int8: CTranslate2's OWN converter (`TransformersConverter`) on the Marian folder, i.e. "an
  equivalent native model". That converter assumes Marian C++ conventions (`<pad>` the LAST vocabulary entry, which
  it deletes; decoder started from a zero vector), so the Marian folder given to it has its vocabulary rotated by one
  id (<pad> moved last, embedding rows and tokenizer ids permuted accordingly): the same function, relabelled. This
  is the least hacky route: no converter code is patched, the folder simply follows the convention it expects.

Speeds are per second of the worker's CPU time (`time.process_time`, all threads; one thread each: torch
`set_num_threads(1)`, CTranslate2 `intra_threads=1`), because on this shared machine wall time mostly measures the
other processes; wall-time speeds are reported as well. The CTranslate2 engines all get identical `translate_batch`
options (CTranslate2's native length penalty), so their ratio compares only the exported models.

Modes:
- `--model_dir DIR` (trained model): natural decoding, each engine stops at its own </s>; BLEU (sacrebleu) against
  test_2016_flickr.de. ours: the paper's defaults from its generation config (GNMT alpha 0.6, input + 50);
  marian: alpha 0.6 with |Y|^alpha, early_stopping="never" as ours, at most (longest source of the batch) + 50 new
  tokens (ours: input + 50 per sentence); CTranslate2: alpha 0.6 with its L^alpha (EOS not counted), max 256 tokens.
- default: a RANDOM model (d_model 256, 3+3 layers, BPE 8000 trained on Multi30k train). Random weights decode to the
  maximum length, so every engine is forced to exactly `--target_length` new tokens per sentence (equal work); BLEU
  is then meaningless and reported only as a sanity field.

    python benchmarks/bench_ctranslate2.py --num_sentences 500
    python benchmarks/bench_ctranslate2.py --model_dir runs/x/final

Results: benchmarks/results/ctranslate2.json and .md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data" / "multi30k" / "raw"
RESULTS = REPO / "benchmarks" / "results"
ENGINES = ("ours", "marian", "ct2_fp32", "ct2_int8", "ct2_native_fp32", "ct2_native_int8")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model_dir", default=None, help="trained model folder (default: random model, forced lengths)")
    p.add_argument("--data_dir", default=str(DEFAULT_DATA))
    p.add_argument(
        "--source_file",
        default=None,
        help="default: DATA_DIR/test_2016_flickr.en (a model trained on the "
        "lowercased tokenized files wants tok/test_2016_flickr.lc.norm.tok.en)",
    )
    p.add_argument("--reference_file", default=None, help="default: DATA_DIR/test_2016_flickr.de")
    p.add_argument("--num_sentences", type=int, default=1000, help="first N sentences of test_2016_flickr")
    p.add_argument("--batch_size", type=int, default=32)
    p.add_argument("--num_beams", type=int, default=4)
    p.add_argument("--target_length", type=int, default=16, help="random model: tokens forced per sentence")
    p.add_argument("--work_dir", default="/tmp/vaswani_bench_ct2", help="scratch folder for models (not the repo)")
    p.add_argument("--engines", default=",".join(ENGINES))
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def read_lines(path: Path, n: int) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f][:n]


# ---------------------------------------------------------------------------------------------------------------------
# preparation (main process)
# ---------------------------------------------------------------------------------------------------------------------


def prepare(args, work: Path) -> dict:
    import torch

    from vaswani_hf import VaswaniConfig, VaswaniForConditionalGeneration
    from vaswani_hf.export import to_ctranslate2, to_marian
    from vaswani_hf.tokenization import load_tokenizer, train_bpe_tokenizer

    work.mkdir(parents=True, exist_ok=True)
    ours_dir = work / "ours"
    if args.model_dir:
        ours_dir = Path(args.model_dir)
        model = VaswaniForConditionalGeneration.from_pretrained(ours_dir)
        tokenizer = load_tokenizer(ours_dir)
    else:
        data = Path(args.data_dir)
        tokenizer = train_bpe_tokenizer([data / "train.en", data / "train.de"], vocab_size=8000, show_progress=False)
        torch.manual_seed(0)
        config = VaswaniConfig(
            vocab_size=len(tokenizer), d_model=256, d_ff=1024, num_heads=4, num_encoder_layers=3, num_decoder_layers=3
        )
        model = VaswaniForConditionalGeneration(config)
        model.save_pretrained(ours_dir)
        tokenizer.save_pretrained(ours_dir)
    model.eval()

    marian = to_marian(model)
    marian.save_pretrained(work / "marian")
    tokenizer.save_pretrained(work / "marian")
    native_src = work / "marian_native_convention"
    save_marian_native_convention(marian, tokenizer, native_src)

    to_ctranslate2(model, work / "ct2_fp32", tokenizer=tokenizer, force=True)
    to_ctranslate2(model, work / "ct2_int8", quantization="int8", tokenizer=tokenizer, force=True)
    import ctranslate2

    for quantization in ("fp32", "int8"):
        out = work / f"ct2_native_{quantization}"
        ctranslate2.converters.TransformersConverter(str(native_src)).convert(
            str(out), quantization=None if quantization == "fp32" else "int8", force=True
        )
    return dict(
        ours=str(ours_dir),
        marian=str(work / "marian"),
        parameters=sum(p.numel() for p in model.parameters()),
        config={
            k: getattr(model.config, k)
            for k in (
                "vocab_size",
                "d_model",
                "d_ff",
                "num_heads",
                "num_encoder_layers",
                "num_decoder_layers",
                "sinusoid_layout",
            )
        },
    )


def save_marian_native_convention(marian, tokenizer, folder: Path) -> None:
    """The same Marian model with <pad> moved to the last id (Marian C++ convention), relabelled by the package's
    own Marian export code (`vaswani_hf.export.marian_vocabulary`), weights and tokenizer together."""
    import copy

    from vaswani_hf.export.marian_vocabulary import move_pad_last, relabel_tokenizer_files

    relabelled = copy.deepcopy(marian)
    new_of_old = move_pad_last(relabelled)
    folder.mkdir(parents=True, exist_ok=True)
    relabelled.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    relabel_tokenizer_files(folder, new_of_old)


# ---------------------------------------------------------------------------------------------------------------------
# workers (one subprocess per engine)
# ---------------------------------------------------------------------------------------------------------------------


def worker(args, spec: dict) -> dict:
    import torch

    torch.set_num_threads(1)
    engine = args.worker
    forced = args.model_dir is None
    L = args.target_length
    sources = read_lines(Path(args.source_file or Path(args.data_dir) / "test_2016_flickr.en"), args.num_sentences)
    work = Path(args.work_dir)

    if engine in ("ours", "marian"):
        from transformers import AutoTokenizer, MarianMTModel

        from vaswani_hf import VaswaniForConditionalGeneration

        if engine == "ours":
            model = VaswaniForConditionalGeneration.from_pretrained(spec["ours"]).eval()
            tokenizer = AutoTokenizer.from_pretrained(spec["ours"])
        else:
            model = MarianMTModel.from_pretrained(spec["marian"]).eval()
            tokenizer = AutoTokenizer.from_pretrained(spec["marian"])
        encoded = tokenizer(sources)["input_ids"]
        order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
        batches = [order[i : i + args.batch_size] for i in range(0, len(order), args.batch_size)]
        options = dict(num_beams=args.num_beams, length_penalty=0.6, do_sample=False)
        if forced:
            options.update(min_new_tokens=L, max_new_tokens=L)
            if engine == "ours":
                options.update(max_length_b=None, length_penalty_type="hf")
        elif engine == "marian":
            options.update(early_stopping="never")  # ours' stopping rule (the paper's t2t bound); max length below
        padded = []
        for batch in batches:
            inputs = tokenizer.pad({"input_ids": [encoded[i] for i in batch]}, return_tensors="pt")
            padded.append((batch, inputs))
        with torch.inference_mode():
            model.generate(**padded[0][1], **{**options, "max_new_tokens": options.get("max_new_tokens", 256)})
            outputs = [None] * len(sources)
            cpu, wall = time.process_time(), time.perf_counter()
            for batch, inputs in padded:
                if engine == "marian" and not forced:  # no per-sentence limit: longest source of the batch + 50
                    options["max_new_tokens"] = int(inputs["attention_mask"].sum(-1).max()) + 50
                generated = model.generate(**inputs, **options)
                for i, seq in zip(batch, generated.tolist()):
                    outputs[i] = seq
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        special = set(tokenizer.all_special_ids)
        token_counts = [sum(t not in special for t in seq) + 1 for seq in outputs]  # + </s> (or forced last)
        hypotheses = tokenizer.batch_decode(outputs, skip_special_tokens=True)
    else:
        import ctranslate2
        from transformers import AutoTokenizer

        folder = work / engine
        translator = ctranslate2.Translator(str(folder), device="cpu", inter_threads=1, intra_threads=1)
        # the native converter copies no tokenizer; token STRINGS are the same in both exports, so ours serves both
        tokenizer = AutoTokenizer.from_pretrained(str(work / "ct2_fp32"))
        token_lists = [tokenizer.convert_ids_to_tokens(ids) for ids in tokenizer(sources)["input_ids"]]
        # the native (Marian-loader) model has add_source_eos=False too: both get our tokens, </s> included
        options = dict(
            max_batch_size=args.batch_size, beam_size=args.num_beams, length_penalty=0.6, max_input_length=0
        )
        if forced:
            options.update(min_decoding_length=L, max_decoding_length=L)
        else:
            options.update(max_decoding_length=256, min_decoding_length=0)
        translator.translate_batch(token_lists[: args.batch_size], **options)  # warm-up
        cpu, wall = time.process_time(), time.perf_counter()
        results = translator.translate_batch(token_lists, **options)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        hyp_tokens = [r.hypotheses[0] for r in results]
        token_counts = [len(t) + (0 if forced else 1) for t in hyp_tokens]
        hypotheses = [
            tokenizer.decode(tokenizer.convert_tokens_to_ids(t), skip_special_tokens=True) for t in hyp_tokens
        ]
    n = len(sources)
    tokens = n * L if forced else sum(token_counts)
    return dict(
        engine=engine,
        sentences=n,
        target_tokens=tokens,
        cpu_seconds=cpu,
        wall_seconds=wall,
        sentences_per_cpu_s=n / cpu,
        tokens_per_cpu_s=tokens / cpu,
        sentences_per_wall_s=n / wall,
        tokens_per_wall_s=tokens / wall,
        peak_rss_mb=peak_rss_mb(),
        hypotheses=hypotheses,
    )


def peak_rss_mb() -> float:
    """This process's peak resident memory. `ru_maxrss` survives execve on Linux (a worker would report the parent's
    peak), so the per-address-space high-water mark VmHWM is read first; ru_maxrss is the fallback."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ---------------------------------------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------------------------------------


def main(argv=None) -> int:
    args = parse_args(argv)
    work = Path(args.work_dir)
    if args.worker:
        spec = json.loads((work / "spec.json").read_text())
        result = worker(args, spec)
        (work / f"result_{args.worker}.json").write_text(json.dumps(result))
        return 0

    import sacrebleu

    t0 = time.perf_counter()
    spec = prepare(args, work)
    (work / "spec.json").write_text(json.dumps(spec))
    prep_seconds = time.perf_counter() - t0
    references = read_lines(
        Path(args.reference_file or Path(args.data_dir) / "test_2016_flickr.de"), args.num_sentences
    )
    results = {}
    for engine in args.engines.split(","):
        command = [
            sys.executable,
            __file__,
            "--worker",
            engine,
            "--work_dir",
            str(work),
            "--data_dir",
            args.data_dir,
            "--num_sentences",
            str(args.num_sentences),
            "--batch_size",
            str(args.batch_size),
            "--num_beams",
            str(args.num_beams),
            "--target_length",
            str(args.target_length),
        ]
        if args.model_dir:
            command += ["--model_dir", args.model_dir]
        if args.source_file:
            command += ["--source_file", args.source_file]
        subprocess.run(command, check=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
        result = json.loads((work / f"result_{engine}.json").read_text())
        hypotheses = result.pop("hypotheses")
        result["bleu"] = round(sacrebleu.corpus_bleu(hypotheses, [references]).score, 2)
        result["_hypotheses"] = hypotheses
        results[engine] = result
        print(
            f"{engine:16s} {result['sentences_per_cpu_s']:8.1f} sent/CPU-s {result['tokens_per_cpu_s']:9.1f} "
            f"tok/CPU-s  {result['sentences_per_wall_s']:8.1f} sent/wall-s  rss {result['peak_rss_mb']:7.1f} MB  "
            f"BLEU {result['bleu']:.2f}",
            flush=True,
        )

    def ratio(a, b, key="sentences_per_cpu_s"):
        return round(results[a][key] / results[b][key], 3) if a in results and b in results else None

    def agreement(a, b):
        if a not in results or b not in results:
            return None
        x, y = results[a]["_hypotheses"], results[b]["_hypotheses"]
        return round(sum(p == q for p, q in zip(x, y)) / len(x), 4)

    summary = dict(
        ours_vs_marian=ratio("ours", "marian"),
        ct2_fp32_vs_ours=ratio("ct2_fp32", "ours"),
        ct2_int8_vs_ours=ratio("ct2_int8", "ours"),
        ct2_fp32_vs_native_fp32=ratio("ct2_fp32", "ct2_native_fp32"),
        ct2_int8_vs_native_int8=ratio("ct2_int8", "ct2_native_int8"),
        ct2_fp32_vs_native_fp32_wall=ratio("ct2_fp32", "ct2_native_fp32", "sentences_per_wall_s"),
        identical_outputs_ct2_fp32_vs_native_fp32=agreement("ct2_fp32", "ct2_native_fp32"),
        identical_outputs_ct2_fp32_vs_ours=agreement("ct2_fp32", "ours"),
        identical_outputs_ct2_int8_vs_ct2_fp32=agreement("ct2_int8", "ct2_fp32"),
    )
    for r in results.values():
        r.pop("_hypotheses")
        for key, value in list(r.items()):
            if isinstance(value, float):
                r[key] = round(value, 3)
    import ctranslate2
    import torch
    import transformers

    report = dict(
        date=datetime.datetime.now().isoformat(timespec="seconds"),
        mode="trained model (natural lengths)"
        if args.model_dir
        else f"RANDOM model, every sentence forced to {args.target_length} tokens: BLEU meaningless",
        data=f"Multi30k test_2016_flickr EN->DE (first {args.num_sentences} sentences)",
        settings=dict(num_beams=args.num_beams, batch_size=args.batch_size, threads=1, length_penalty=0.6),
        model=spec["config"],
        parameters=spec["parameters"],
        versions=dict(
            torch=torch.__version__,
            transformers=transformers.__version__,
            ctranslate2=ctranslate2.__version__,
            python=platform.python_version(),
        ),
        machine=dict(cpus=os.cpu_count(), load_average=os.getloadavg()),
        preparation_seconds=round(prep_seconds, 1),
        engines=results,
        summary=summary,
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "ctranslate2.json").write_text(json.dumps(report, indent=2) + "\n")
    lines = [
        "# CTranslate2 export benchmark",
        "",
        f"{report['date']}, {report['data']}, beam {args.num_beams}, batch {args.batch_size}, 1 thread per engine, "
        f"CPU ({os.cpu_count()} shared cores, load average {report['machine']['load_average'][0]:.1f}).",
        f"Mode: {report['mode']}. Model: {spec['parameters'] / 1e6:.1f}M parameters, {spec['config']}.",
        "Speeds per second of the engine process's CPU time (the machine is shared; wall time in the JSON).",
        "",
        "| engine | sentences/s | target tokens/s | sentences/s (wall) | peak RSS (MB) | BLEU |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, r in results.items():
        lines.append(
            f"| {name} | {r['sentences_per_cpu_s']:.1f} | {r['tokens_per_cpu_s']:.0f} | "
            f"{r['sentences_per_wall_s']:.1f} | {r['peak_rss_mb']:.0f} | {r['bleu']:.2f} |"
        )
    lines += ["", "Ratios and agreement:", ""] + [f"- {k}: {v}" for k, v in summary.items()]
    lines += [
        "",
        "ct2_native_*: CTranslate2's own TransformersConverter on the `to_marian` folder (with <pad> moved "
        "last, the Marian convention that converter requires); ct2_*: `vaswani_hf.export.to_ctranslate2`.",
    ]
    (RESULTS / "ctranslate2.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
