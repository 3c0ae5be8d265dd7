"""Stage 6, decoding: greedy and beam 4, ours against `MarianMTModel` with identical weights, batches of 64 and 256.

`benchmarks/bench_decoding.py` on the device (`--device cuda`: wall time with the device synchronised): a random
model of the base sizes (d_model 512, 6 + 6 layers) with a BPE of 8,000 trained on the synthetic corpus's training
side, its test sources, every sentence forced to 32 new tokens (random weights would otherwise all run to the length
limit), beam 4 with the same |Y|^0.6 length penalty for both (`beam4_hf`). Three contenders: ours as shipped (the
lean loops), ours through transformers' loops, Marian. Figures: sentences/s, target tokens/s, the ratio ours /
Marian, and how many outputs are identical.
"""

from __future__ import annotations

from common import Context, Recorder

GPU = dict(
    sentences={64: 512, 256: 1024},
    target_length=32,
    vocab=8000,
    model=["--d_model", "512", "--d_ff", "2048", "--num_heads", "8", "--num_layers", "6"],
)
SMOKE = dict(
    sentences={4: 8},
    target_length=6,
    vocab=300,
    model=["--d_model", "32", "--d_ff", "64", "--num_heads", "2", "--num_layers", "1"],
)


def run(ctx: Context, rec: Recorder) -> None:
    import bench_decoding
    from stage_train_script import GPU as TRAIN_GPU
    from stage_train_script import SMOKE as TRAIN_SMOKE
    from stage_train_script import corpus

    sizes = SMOKE if ctx.smoke else GPU
    data = corpus(ctx, (TRAIN_SMOKE if ctx.smoke else TRAIN_GPU)["pairs"])
    rec.set(
        "setup",
        {
            "model": " ".join(sizes["model"]),
            "vocab": sizes["vocab"],
            "target_length": sizes["target_length"],
            "smoke": ctx.smoke,
        },
    )
    for batch, sentences in sizes["sentences"].items():
        argv = [
            "--device",
            ctx.device,
            "--data_dir",
            str(data),
            "--source_file",
            str(data / "test.en"),
            "--num_sentences",
            str(sentences),
            "--batch_size",
            str(batch),
            "--max_tokens",
            str(batch * 512),
            "--target_length",
            str(sizes["target_length"]),
            "--vocab_size",
            str(sizes["vocab"]),
            "--repeats",
            "1",
            "--settings",
            "greedy,beam4_hf",
            "--out",
            str(ctx.work / f"decoding_b{batch}"),
            *sizes["model"],
        ]
        report = bench_decoding.main(argv)
        rec.set(
            f"batch_{batch}",
            {
                "sentences": sentences,
                "clock": report["hardware"].get("clock"),
                "results": {name: summary(entry) for name, entry in report["results"].items()},
            },
        )


def summary(entry: dict) -> dict:
    keep = ("sentences_per_s", "target_tokens_per_s")
    return {
        "ours": {k: entry["ours"][k] for k in keep},
        "ours_transformers_loop": {k: entry["ours_transformers_loop"][k] for k in keep},
        "marian": {k: entry["marian"][k] for k in keep},
        "ratio_ours_over_marian": entry["ratio_ours_over_marian"]["sentences_per_s"],
        "identical_outputs": entry["identical_outputs"],
        "identical_lean_vs_transformers_loop": entry["identical_outputs_lean_vs_transformers_loop"],
    }


def markdown(result: dict) -> list[str]:
    s = result.get("setup", {})
    lines = [
        f"- random model `{s.get('model')}`, BPE {s.get('vocab')}, {s.get('target_length')} new tokens forced per "
        "sentence; beam 4 with |Y|^0.6 for both",
        "",
        "| batch | setting | ours sent/s | ours (transformers loop) sent/s | Marian sent/s | ours / Marian "
        "| identical outputs ours / Marian | identical lean / loop |",
        "|---|---|---:|---:|---:|---:|---|---|",
    ]
    for key in sorted((k for k in result if k.startswith("batch_")), key=lambda k: int(k.split("_")[1])):
        for name, r in result[key]["results"].items():
            lines.append(
                f"| {key.split('_')[1]} | {name} | {r['ours']['sentences_per_s']} | "
                f"{r['ours_transformers_loop']['sentences_per_s']} | {r['marian']['sentences_per_s']} | "
                f"**{r['ratio_ours_over_marian']}** | {r['identical_outputs']} | "
                f"{r['identical_lean_vs_transformers_loop']} |"
            )
    return lines
