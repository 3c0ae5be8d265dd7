#!/usr/bin/env python
"""Decoding precision on one CPU (issue 53): fp32, bf16 and int8 of ours against CTranslate2's compute types, in one
run, with the processor's flags and the load recorded. Not a test.

Stages (`--stages`, default all):
- products: GFLOP/s of the matrix products of a base-size decoding step (128 rows: 32 sentences x 4 beams) and of
  1024^3, in fp32, bf16 and int8 (PyTorch's dynamically quantised linear layer), per thread count.
- sizes: `generate()` over RANDOM models from the Multi30k recipe's 6M parameters to the base's 63M (`--sizes`), every
  sentence forced to `--target_length` tokens, bf16 and int8 against fp32: where bf16 starts to gain on this kind of
  units, i.e. `vaswani_hf.precision.BF16_MIN_PARAMETERS["decoding"]` (today a placeholder).
- agreement (`--model_dir`, a trained model): held-out text decoded greedily and with beam 4 in fp32, bf16, int8:
  lines identical to fp32's, and BLEU (sacreBLEU, 13a) of each. The goal: >= 97% identical greedy lines, BLEU within
  0.2.
- speed: sentences/s of `inference.translate` (our generate() in token batches) at the model's decoding (beam 4,
  GNMT 0.6) in batches of `--batch_size` sentences, fp32 / bf16 / int8 interleaved over `--rounds`, for every thread
  count, and CTranslate2 on the same lines: our export in float32, run in every compute type this CPU supports; its
  best type is named. Without `--model_dir`: a random base model (63M, 35k BPE on Multi30k), every sentence forced to
  `--target_length` tokens for every engine.
- tool: the whole `vaswani-translate` process (the issue's measurement: `--tool_lines` lines, beam 4, at most 30 new
  tokens) per `--dtype`, interleaved: wall and CPU seconds, including start-up and loading.

Times: wall clock (the primary clock, for a quiet machine) and the process's CPU time; the best of the rounds is kept.
The load average is recorded before and after every stage: on a loaded machine the ratios are not trustworthy.

    python benchmarks/bench_precision.py                     # random base model: ~15 min on 2 quiet cores
    python benchmarks/bench_precision.py --model_dir DIR --source_file ../shared/data/multi30k/raw/test_2016_flickr.en \
        --reference_file ../shared/data/multi30k/raw/test_2016_flickr.de     # a trained model (cased raw text)
    python benchmarks/bench_precision.py --smoke --out /tmp/p  # every stage on tiny sizes (tests/test_benchmarks.py)

Results: benchmarks/results/precision_decoding.json and .md (`--out` stem).
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

import torch

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data" / "multi30k" / "raw"
STAGES = ("products", "sizes", "agreement", "speed", "tool")
DTYPES = ("fp32", "bf16", "int8")
# name: d_model, d_ff, heads, layers (encoder = decoder), vocabulary; parameters are counted from the built model
SIZES = {
    "multi30k": (256, 512, 4, 3, 8000),
    "small": (256, 1024, 4, 6, 16000),
    "medium": (384, 1536, 6, 6, 24000),
    "base": (512, 2048, 8, 6, 37000),
    "big": (1024, 4096, 16, 6, 37000),
    "tiny": (32, 64, 2, 1, 1000),
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model_dir", default=None, help="trained model folder (default: a random base model)")
    p.add_argument("--source_file", default=str(DATA / "test_2016_flickr.en"), help="held-out source text")
    p.add_argument("--reference_file", default=str(DATA / "test_2016_flickr.de"), help="its references (BLEU)")
    p.add_argument("--train_file", default=str(DATA / "train.en"), help="random model: text for its BPE (+ .de)")
    p.add_argument("--stages", default=",".join(STAGES))
    p.add_argument("--threads", default="1,2", help="thread counts of the products, speed and tool stages")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (the best kept)")
    p.add_argument("--num_sentences", type=int, default=256, help="speed stage: the first N source lines")
    p.add_argument("--batch_size", type=int, default=32, help="sentences per batch (speed, agreement, CTranslate2)")
    p.add_argument("--target_length", type=int, default=30, help="random models: new tokens forced per sentence")
    p.add_argument("--sizes", default="multi30k,small,medium,base", help=f"sizes stage: of {', '.join(SIZES)}")
    p.add_argument("--tool_lines", type=int, default=256)
    p.add_argument("--work_dir", default="/tmp/vaswani_bench_precision", help="random model, exports (not the repo)")
    p.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "precision_decoding"), help="output stem")
    p.add_argument("--smoke", action="store_true", help="tiny sizes, few lines, one round: checks every stage runs")
    args = p.parse_args(argv)
    args.stages = [s for s in args.stages.split(",") if s]
    args.threads = [int(t) for t in args.threads.split(",")]
    args.sizes = [s for s in args.sizes.split(",") if s]
    bad = [s for s in args.stages if s not in STAGES] + [s for s in args.sizes if s not in SIZES]
    if bad or min(args.threads) < 1 or args.rounds < 1:
        p.error(f"unknown stage or size {bad}, or threads / rounds below 1")
    if "agreement" in args.stages and not args.model_dir:
        args.stages.remove("agreement")  # agreement means something only for a trained model
    if args.smoke:
        args.rounds, args.num_sentences, args.tool_lines, args.target_length = 1, 8, 8, 4
        args.sizes, args.threads = ["tiny"], [1]
    return args


def read_lines(path, n=None) -> list[str]:
    return Path(path).read_text(encoding="utf-8").splitlines()[:n]


def clock(run) -> tuple[float, float, object]:
    """(wall seconds, CPU seconds of this process, result) of `run()`."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = run()
    return time.perf_counter() - wall, time.process_time() - cpu, result


def load_average() -> float:
    return round(os.getloadavg()[0], 2)


# ---------------------------------------------------------------------------------------------------------------------
# products and sizes: the kernels, and where bf16 starts to gain
# ---------------------------------------------------------------------------------------------------------------------


def best_seconds(run, repeats: int = 10) -> float:
    run()
    return min(clock(run)[0] for _ in range(repeats))


def products(args) -> dict:
    """GFLOP/s of x (m, k) @ W (n, k)^T in fp32, bf16 and int8 (a dynamically quantised linear layer)."""
    from vaswani_hf.precision import Choice, prepare_for_decoding

    shapes = [(1024, 1024, 1024), (128, 512, 512), (128, 512, 2048), (128, 2048, 512), (128, 512, 37000)]
    if args.smoke:
        shapes = [(16, 32, 64)]
    found = {}
    for threads in args.threads:
        torch.set_num_threads(threads)
        for m, k, n in shapes:
            x, layer = torch.randn(m, k), torch.nn.Linear(k, n, bias=False)
            int8 = prepare_for_decoding(torch.nn.Sequential(torch.nn.Linear(k, n, bias=False)), Choice("int8", "", ""))
            with torch.inference_mode():
                row = {
                    "fp32": best_seconds(lambda: layer(x)),
                    "int8": best_seconds(lambda: int8(x)),
                }
                layer.to(torch.bfloat16)
                xb = x.bfloat16()
                row["bf16"] = best_seconds(lambda: layer(xb))
            found[f"{threads} thread(s), {m}x{k}x{n}"] = {d: round(2 * m * k * n / s / 1e9, 1) for d, s in row.items()}
    return found


def random_model(size: str, vocab: int | None = None):
    from vaswani_hf import VaswaniConfig, VaswaniForConditionalGeneration

    d_model, d_ff, heads, layers, default_vocab = SIZES[size]
    torch.manual_seed(0)
    config = VaswaniConfig(
        vocab_size=vocab or default_vocab,
        d_model=d_model,
        d_ff=d_ff,
        num_heads=heads,
        num_encoder_layers=layers,
        num_decoder_layers=layers,
    )
    return VaswaniForConditionalGeneration(config).eval()


def in_precisions(model) -> dict:
    """{dtype: a copy of `model` in it} (`precision.prepare_for_decoding`, as the tools load it)."""
    import copy

    from vaswani_hf.precision import Choice, prepare_for_decoding

    return {d: prepare_for_decoding(copy.deepcopy(model), Choice(d, d, "")) for d in DTYPES}


def sizes(args, lengths: list[int]) -> dict:
    """generate() per size and precision on random ids of the source lines' lengths, forced lengths, beam 4."""
    found = {}
    batch = lengths[: args.batch_size]
    torch.manual_seed(1)
    ids = torch.zeros(len(batch), max(batch), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, length in enumerate(batch):
        ids[row, :length], mask[row, :length] = torch.randint(4, 1000, (length,)), 1
    options = dict(num_beams=4, min_new_tokens=args.target_length, max_new_tokens=args.target_length)
    for size in args.sizes:
        models = in_precisions(random_model(size))
        parameters = models["fp32"].num_parameters()
        for threads in args.threads:
            torch.set_num_threads(threads)
            best = {}
            for _ in range(args.rounds):
                for dtype, model in models.items():
                    with torch.inference_mode():
                        wall = clock(lambda m=model: m.generate(input_ids=ids, attention_mask=mask, **options))[0]
                    best[dtype] = min(best.get(dtype, wall), wall)
            found[f"{size}, {threads} thread(s)"] = {
                "parameters": parameters,
                "seconds": {d: round(s, 3) for d, s in best.items()},
                "speed_over_fp32": {d: round(best["fp32"] / s, 3) for d, s in best.items()},
            }
    return found


# ---------------------------------------------------------------------------------------------------------------------
# the model of the agreement, speed and tool stages: a trained folder, or a random base model saved once
# ---------------------------------------------------------------------------------------------------------------------


def model_folder(args) -> Path:
    """`--model_dir`, or a random model of the base size (the smoke run's: tiny) with a BPE trained on Multi30k's
    training text (35k tokens: the paper's ~37k asked of a 29k-sentence corpus), saved in the work folder."""
    if args.model_dir:
        return Path(args.model_dir)
    from vaswani_hf.tokenization import train_bpe_tokenizer

    size = "tiny" if args.smoke else "base"
    folder = Path(args.work_dir) / f"random-{size}"
    if (folder / "model.safetensors").is_file():
        return folder
    train = Path(args.train_file)
    files = [str(train), str(train.with_suffix(".de"))]
    tokenizer = train_bpe_tokenizer(files, vocab_size=SIZES[size][4], show_progress=False)
    model = random_model(size, vocab=len(tokenizer))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def decoding_options(args, trained: bool) -> dict:
    """The model's own decoding (its generation config: beam 4, GNMT 0.6, input + 50) for a trained model; forced
    lengths for a random one (whose outputs would otherwise all run to the limit at different costs)."""
    if trained:
        return {}
    return dict(min_new_tokens=args.target_length, max_new_tokens=args.target_length, max_length_b=None)


def agreement(args, folder: Path, sources: list[str], references: list[str]) -> dict:
    """Greedy and beam-4 translations of the held-out text in each precision: identical lines and BLEU."""
    import sacrebleu

    from vaswani_hf.translation.inference import load_for_decoding, translate

    torch.set_num_threads(max(args.threads))
    found = {}
    for beams in (1, 4):
        outputs = {}
        for dtype in (*DTYPES, "auto"):
            model, tokenizer, choice = load_for_decoding(folder, "cpu", dtype)
            lines = translate(model, tokenizer, sources, num_beams=beams, batch_size=args.batch_size, progress=False)
            outputs[choice.line() if dtype == "auto" else dtype] = lines
        fp32 = outputs["fp32"]
        found[f"beam {beams}"] = {
            name: {
                "identical_to_fp32": round(sum(a == b for a, b in zip(lines, fp32)) / len(fp32), 4),
                "bleu": round(sacrebleu.corpus_bleu(lines, [references]).score, 2),
            }
            for name, lines in outputs.items()
        }
    return found


def ct2_engines(args, folder: Path, threads: int, trained: bool) -> dict:
    """{"ct2 <type>": translate(lines)} for every compute type this CPU supports, from one float32 export (none
    where CTranslate2 is not installed: `pip install vaswani_hf[ct2]`)."""
    try:
        import ctranslate2
    except ImportError:
        print("CTranslate2 is not installed: its engines are skipped", file=sys.stderr)
        return {}

    from vaswani_hf.export import to_ctranslate2
    from vaswani_hf.export.ctranslate2 import CTranslate2Translator

    export = Path(args.work_dir) / f"ct2-{folder.name}"
    if not (export / "model.bin").is_file():
        to_ctranslate2(folder, export, force=True)
    engines = {}
    for compute_type in sorted(ctranslate2.get_supported_compute_types("cpu")):
        translator = CTranslate2Translator(export, compute_type=compute_type, intra_threads=threads)
        if trained:
            engines[f"ct2 {compute_type}"] = lambda lines, t=translator: t.translate(lines, batch_size=args.batch_size)
            continue
        forced = dict(min_decoding_length=args.target_length, max_decoding_length=args.target_length)
        options = dict(beam_size=4, max_batch_size=args.batch_size, length_penalty=0.6, **forced)
        engines[f"ct2 {compute_type}"] = lambda lines, t=translator, o=options: [
            t.decode(r.hypotheses[0]) for r in t.translator.translate_batch(t.encode(lines), **o)
        ]
    return engines


def speed(args, folder: Path, sources: list[str]) -> dict:
    """Sentences/s of ours in each precision and of CTranslate2 in each compute type, interleaved, per thread
    count; the best of `--rounds` (wall clock), with CPU seconds beside."""
    from vaswani_hf.translation.inference import load_for_decoding, translate

    trained = args.model_dir is not None
    lines = sources[: args.num_sentences]
    options = dict(batch_size=args.batch_size, max_tokens=None, progress=False, **decoding_options(args, trained))
    found = {}
    for threads in args.threads:
        torch.set_num_threads(threads)
        engines = {}
        for dtype in DTYPES:
            model, tokenizer, _ = load_for_decoding(folder, "cpu", dtype)
            engines[f"ours {dtype}"] = lambda x, m=model, t=tokenizer: translate(m, t, x, **options)
        engines.update(ct2_engines(args, folder, threads, trained))
        for run in engines.values():  # warm-up: one batch each
            run(lines[: args.batch_size])
        best = {}
        for _ in range(args.rounds):
            for name, run in engines.items():
                wall, cpu, _ = clock(lambda r=run: r(lines))
                if name not in best or wall < best[name]["wall_seconds"]:
                    best[name] = {"wall_seconds": round(wall, 3), "cpu_seconds": round(cpu, 3)}
        for result in best.values():
            result["sentences_per_s"] = round(len(lines) / result["wall_seconds"], 2)
        found[f"{threads} thread(s)"] = summarise(best)
    return found


def summarise(best: dict) -> dict:
    """The engines' results with the ratios the issue's goals name."""
    speed_of = {name: r["sentences_per_s"] for name, r in best.items()}
    cpu = {name: r["cpu_seconds"] for name, r in best.items()}
    ct2 = {name: s for name, s in speed_of.items() if name.startswith("ct2")}
    ours = {name: s for name, s in speed_of.items() if name.startswith("ours")}
    best_ct2 = max(ct2, key=ct2.get) if ct2 else None
    best_ours = max(ours, key=ours.get)
    return {
        "engines": best,
        "bf16_over_fp32": round(speed_of["ours bf16"] / speed_of["ours fp32"], 3),
        "int8_over_fp32": round(speed_of["ours int8"] / speed_of["ours fp32"], 3),
        "by_cpu_time": {  # the same ratios per CPU second: steadier than the wall clock on a loaded machine
            "bf16_over_fp32": round(cpu["ours fp32"] / cpu["ours bf16"], 3),
            "int8_over_fp32": round(cpu["ours fp32"] / cpu["ours int8"], 3),
            "best_ct2_over_best_ours": round(cpu[best_ours] / cpu[best_ct2], 3) if best_ct2 else None,
        },
        "best_ours": best_ours,
        "best_ct2": best_ct2,
        "best_ct2_over_best_ours": round(ct2[best_ct2] / ours[best_ours], 3) if best_ct2 else None,
    }


def tool(args, folder: Path, sources: list[str]) -> dict:
    """The whole `vaswani-translate` process per --dtype (the issue's command), interleaved: wall and CPU seconds."""
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    source = work / "tool_input.txt"
    source.write_text("\n".join(sources[: args.tool_lines]) + "\n", encoding="utf-8")
    found = {}
    for threads in args.threads:
        best = {}
        for _ in range(args.rounds):
            for dtype in (*DTYPES, "auto"):
                command = [sys.executable, str(REPO / "scripts" / "translate.py"), str(source), "--model", str(folder)]
                command += ["--num_beams", "4", "--max_new_tokens", "30", "--threads", str(threads), "--dtype", dtype]
                command += ["--output", str(work / f"tool_{dtype}.txt"), "--overwrite", "--no_progress"]
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                wall, _, done = clock(lambda c=command: subprocess.run(c, capture_output=True, text=True, check=True))
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
                line = next((x for x in done.stderr.splitlines() if x.startswith("precision: ")), "")
                if dtype not in best or wall < best[dtype]["wall_seconds"]:
                    best[dtype] = {"wall_seconds": round(wall, 2), "cpu_seconds": round(cpu, 2), "line": line}
        fp32, fp32_cpu = best["fp32"]["wall_seconds"], best["fp32"]["cpu_seconds"]
        found[f"{threads} thread(s)"] = {
            "runs": best,
            "speed_over_fp32": {d: round(fp32 / r["wall_seconds"], 3) for d, r in best.items()},
            "speed_over_fp32_by_cpu_time": {d: round(fp32_cpu / r["cpu_seconds"], 3) for d, r in best.items()},
        }
    return found


# ---------------------------------------------------------------------------------------------------------------------
# the run and its report
# ---------------------------------------------------------------------------------------------------------------------


def main(argv=None) -> dict:
    args = parse_args(argv)
    from vaswani_hf.precision import cpu_record

    sources = read_lines(args.source_file)
    folder = model_folder(args) if {"agreement", "speed", "tool"} & set(args.stages) else None
    report = {
        "benchmark": "decoding precision on one CPU: ours fp32 / bf16 / int8 against CTranslate2 (issue 53)",
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "cpu": cpu_record(),
        "cores": os.cpu_count(),
        "versions": {"python": platform.python_version(), "torch": torch.__version__},
        "model": str(args.model_dir) if args.model_dir else f"random, in {folder}",
        "settings": {k: v for k, v in vars(args).items() if k not in ("out",)},
        "load_average": {},
        "stages": {},
    }
    with __import__("contextlib").suppress(ImportError):
        report["versions"]["ctranslate2"] = __import__("ctranslate2").__version__
    if args.smoke:
        sources = sources[:16]
    references = read_lines(args.reference_file, len(sources)) if args.model_dir else []
    tokenizer = None
    for stage in args.stages:
        before = load_average()
        print(f"stage {stage} (load average {before})", file=sys.stderr, flush=True)
        if stage == "products":
            result = products(args)
        elif stage == "sizes":
            if tokenizer is None:
                from vaswani_hf.tokenization import load_tokenizer

                tokenizer = load_tokenizer(model_folder(args))
            result = sizes(args, [len(ids) for ids in tokenizer(sources[: args.batch_size])["input_ids"]])
        elif stage == "agreement":
            result = agreement(args, folder, sources, references)
        elif stage == "speed":
            result = speed(args, folder, sources)
        else:
            result = tool(args, folder, sources)
        report["stages"][stage] = result
        report["load_average"][stage] = [before, load_average()]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    out.with_suffix(".md").write_text(markdown(report), encoding="utf-8")
    print(markdown(report))
    return report


def markdown(report: dict) -> str:
    cpu, stages = report["cpu"], report["stages"]
    emulated = " (NO bf16 matrix units: bf16 is emulated here)" if cpu["bf16_units"] == "none" else ""
    lines = [
        "# Decoding precision on one CPU: fp32, bf16, int8, CTranslate2",
        "",
        f"- {report['date']}, {cpu['summary']}{emulated}; torch kernels {cpu['torch_kernels']}; "
        f"{report['cores']} logical cores; flags {', '.join(f for f, on in cpu['flags'].items() if on)}",
        f"- model: {report['model']}; versions {report['versions']}",
        f"- load average (1 min) before / after each stage: {report['load_average']}",
        "- times are wall clock, the best of the interleaved rounds (CPU seconds in the JSON)",
        "",
    ]
    if "products" in stages:
        lines += [
            "## Matrix products (GFLOP/s)",
            "",
            "| shape | fp32 | bf16 | int8 | bf16 / fp32 |",
            "|---|---|---|---|---|",
        ]
        for shape, r in stages["products"].items():
            lines.append(f"| {shape} | {r['fp32']} | {r['bf16']} | {r['int8']} | {r['bf16'] / r['fp32']:.2f} |")
        lines.append("")
    if "sizes" in stages:
        lines += ["## generate() by model size (random, forced lengths, beam 4)", ""]
        lines += ["| size | parameters | bf16 / fp32 | int8 / fp32 |", "|---|---|---|---|"]
        for size, r in stages["sizes"].items():
            ratio = r["speed_over_fp32"]
            lines.append(f"| {size} | {r['parameters'] / 1e6:.1f}M | {ratio['bf16']} | {ratio['int8']} |")
        lines.append("")
    if "agreement" in stages:
        lines += ["## Agreement with fp32 (trained model, held-out text)", ""]
        lines += ["| decoding | precision | identical lines | BLEU |", "|---|---|---|---|"]
        for decoding, rows in stages["agreement"].items():
            for name, r in rows.items():
                lines.append(f"| {decoding} | {name} | {100 * r['identical_to_fp32']:.1f}% | {r['bleu']} |")
        lines.append("")
    if "speed" in stages:
        lines += ["## Sentences/s: ours and CTranslate2", ""]
        for threads, r in stages["speed"].items():
            speeds = ", ".join(f"{name} {e['sentences_per_s']}" for name, e in r["engines"].items())
            lines.append(
                f"- {threads}: {speeds}; bf16 / fp32 **{r['bf16_over_fp32']}x**, int8 / fp32 {r['int8_over_fp32']}x; "
                f"best CTranslate2 ({r['best_ct2']}) / best ours ({r['best_ours']}): **{r['best_ct2_over_best_ours']}x**; "
                f"per CPU second: {r['by_cpu_time']}"
            )
        lines.append("")
    if "tool" in stages:
        lines += ["## The whole vaswani-translate process", ""]
        for threads, r in stages["tool"].items():
            runs = ", ".join(f"{d} {x['wall_seconds']} s" for d, x in r["runs"].items())
            lines.append(
                f"- {threads}: {runs}; speed over fp32 {r['speed_over_fp32']} (per CPU second: "
                f"{r['speed_over_fp32_by_cpu_time']}); auto: {r['runs']['auto']['line']}"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
