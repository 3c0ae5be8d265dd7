"""Stage 4, the training step: ours against `MarianMTModel` with identical weights, on the same batches, in one process.

The paper's base and big models with its 37k vocabulary, 25,000 target tokens a step (the recipe's update on one
80 GB card; if a model does not fit, the largest batch that does, halving the rows, and the report says so), bf16
autocast, fused Adam, SDPA attention: forward + loss + backward + Adam, as `benchmarks/bench_training_step.py` makes
it (its `build`, `make_batch` and `train_step`; ours with the paper's label-smoothed loss, Marian with its own
cross-entropy). Timed interleaved (ours, Marian, ours, ...) after warm-up, the device synchronised around each step.
Then both compiled (`torch.compile`; the first compiled step's time less an eager step is the compile time reported).

Figures: target tokens/s (real tokens, padding excluded), peak memory (the step's peak allocation above the memory
held before it, and that plus the model state), and MFU: the step's useful FLOPs (`training_flops`, the paper's
dense FLOPs of real tokens; the formula of docs/reproducing-the-paper.md) per second over the bf16 matmul ceiling of
the environment stage.
"""

from __future__ import annotations

import statistics
import time

from common import Context, Recorder, first_line, peak_memory_mib, reset_peak_memory, synchronize

TARGET_TOKENS = 25_000
LENGTH = 32  # positions per sentence; WMT14 EN-DE has ~30 BPE tokens a sentence
SMOKE_SIZES = dict(d_model=32, d_ff=64, num_heads=2, num_encoder_layers=1, num_decoder_layers=1)


def training_flops(config, batch) -> float:
    """Forward + backward FLOPs (3 x forward, 2 per multiply-add) of the real (unpadded) tokens of `batch`:
    projections and feed-forward per token, attention per (query, key) pair of each sentence's real lengths, and the
    output layer over the vocabulary per target token."""
    d, d_ff, vocab = config.d_model, config.d_ff, config.vocab_size
    src = batch["attention_mask"].sum(1).double()
    tgt = (batch["labels"] != -100).sum(1).double()
    enc = config.num_encoder_layers * (src.sum() * (4 * d * d + 2 * d * d_ff) + 2 * d * (src * src).sum())
    dec = config.num_decoder_layers * (
        tgt.sum() * (6 * d * d + 2 * d * d_ff)
        + src.sum() * 2 * d * d
        + 2 * d * ((tgt * tgt).sum() + (tgt * src).sum())
    )
    return float(6 * (enc + dec + tgt.sum() * d * vocab))


def fit_batch(models: dict, rows: int, length: int, vocab: int, device, dtype):
    """The batch of `rows` sentences, halved until one step of every model fits in memory: (batches, note)."""
    import torch
    from bench_training_step import make_batch, train_step

    note = None
    while True:
        batches = [make_batch(rows, length, vocab, seed=s, device=device) for s in range(3)]
        try:
            for model, optimizer, smoothing in models.values():
                train_step(model, optimizer, batches[0], smoothing, dtype)
            synchronize(device)
            return batches, note
        except torch.cuda.OutOfMemoryError:
            del batches
            torch.cuda.empty_cache()
            rows //= 2
            note = f"{TARGET_TOKENS} target tokens did not fit: the largest that did is {rows} x {length} positions"
            if rows < 1:
                raise


def time_steps(models: dict, batches, rounds: int, steps: int, device, dtype) -> dict:
    """Interleaved timing: per round, `steps` steps of each model in turn; step seconds and peak memory per model."""
    import torch
    from bench_training_step import train_step

    times = {name: [] for name in models}
    peaks = {name: 0.0 for name in models}
    for _ in range(rounds):
        for name, (model, optimizer, smoothing) in models.items():
            synchronize(device)
            before = torch.cuda.memory_allocated(device) / 2**20 if torch.device(device).type == "cuda" else 0.0
            reset_peak_memory(device)
            for i in range(steps):
                start = time.perf_counter()
                train_step(model, optimizer, batches[i % len(batches)], smoothing, dtype)
                synchronize(device)
                times[name].append(time.perf_counter() - start)
            peaks[name] = max(peaks[name], peak_memory_mib(device) - before)
    return {"step_seconds": times, "peak_step_mib": peaks}


def summarise(measured: dict, models: dict, batches, ceiling: float | None) -> dict:
    tokens = statistics.mean(int((b["labels"] != -100).sum()) for b in batches)
    flops = statistics.mean(training_flops(next(iter(models.values()))[0].config, b) for b in batches)
    out = {}
    for name, (model, _optimizer, _smoothing) in models.items():
        step = statistics.median(measured["step_seconds"][name])
        state_mib = sum(p.numel() for p in model.parameters()) * 16 / 2**20  # fp32 weight, grad, 2 Adam moments
        tflops = flops / step / 1e12
        out[name] = {
            "step_ms": round(step * 1e3, 2),
            "target_tokens_per_s": round(tokens / step),
            "peak_step_mib": round(measured["peak_step_mib"][name]),
            "peak_with_state_mib": round(measured["peak_step_mib"][name] + state_mib),
            "tflops": float(f"{tflops:.4g}"),
            "mfu": float(f"{tflops / ceiling:.4g}") if ceiling else None,
            "attention": getattr(model.config, "_attn_implementation", None),
        }
    out["ratio_tokens_per_s"] = round(out["ours"]["target_tokens_per_s"] / out["marian"]["target_tokens_per_s"], 3)
    out["ratio_peak_step_memory"] = round(out["ours"]["peak_step_mib"] / max(out["marian"]["peak_step_mib"], 1), 3)
    return out


def build_models(preset: str, vocab: int, smoke: bool, device) -> dict:
    import torch
    from bench_training_step import build, make_optimizer, smoothing_of

    models = {}
    for name in ("ours", "marian"):
        model = build(name, preset, vocab, **(SMOKE_SIZES if smoke else {})).to(device)
        models[name] = (model, make_optimizer(model, torch.device(device)), smoothing_of(name))
    return models


def compile_models(models: dict, batches, smoke: bool, device, dtype, eager_step_s: dict) -> dict:
    """Both models through torch.compile (smoke: the `eager` backend, tracing only); returns compile seconds each."""
    import torch
    from bench_training_step import train_step

    seconds = {}
    for name, (model, optimizer, smoothing) in list(models.items()):
        compiled = torch.compile(model, backend="eager" if smoke else "inductor")
        start = time.perf_counter()
        train_step(compiled, optimizer, batches[0], smoothing, dtype)
        synchronize(device)
        seconds[name] = round(time.perf_counter() - start - eager_step_s[name], 1)
        models[name] = (compiled, optimizer, smoothing)
    return seconds


def run(ctx: Context, rec: Recorder) -> None:
    import torch

    ceiling = ctx.earlier.get("environment", {}).get("bf16_matmul_tflops")
    presets = [("base", 512)] if ctx.smoke else [("base", 37000), ("big", 37000)]
    rows, length = (4, 12) if ctx.smoke else (round(TARGET_TOKENS / (LENGTH * 15 / 16)), LENGTH)
    rounds, steps = (1, 2) if ctx.smoke else (3, 5)
    dtype = torch.bfloat16
    rec.set(
        "setup",
        {
            "autocast": "bfloat16",
            "fused_adam": ctx.on_gpu,
            "rounds": rounds,
            "steps_per_round": steps,
            "batch": [rows, length],
            "smoke": ctx.smoke,
            "ceiling_tflops": ceiling,
        },
    )
    built = {}
    for preset, vocab in presets:  # eager first for both presets: the headline figures before any compile time
        models = build_models(preset, vocab, ctx.smoke, ctx.device)
        batches, note = fit_batch(models, rows, length, vocab, ctx.device, dtype)
        measured = time_steps(models, batches, rounds, steps, ctx.device, dtype)
        result = {
            "preset": preset,
            "mode": "eager",
            "batch": list(batches[0]["labels"].shape),
            "note": note,
            **summarise(measured, models, batches, ceiling),
        }
        rec.append("runs", result)
        built[preset] = (models, batches, result)
        if ctx.on_gpu and len(presets) > 1:  # one preset on the card at a time
            built[preset] = None
            del models, batches
            torch.cuda.empty_cache()
    for preset, vocab in presets:
        if built.get(preset) is None:
            models = build_models(preset, vocab, ctx.smoke, ctx.device)
            batches, _note = fit_batch(models, rows, length, vocab, ctx.device, dtype)
            eager = next(r for r in rec.data["runs"] if r["preset"] == preset)
        else:
            models, batches, eager = built.pop(preset)
        try:
            compile_s = compile_models(
                models, batches, ctx.smoke, ctx.device, dtype, {n: eager[n]["step_ms"] / 1e3 for n in models}
            )
        except Exception as error:  # noqa: BLE001 - a compile failure is a finding, not the end of the check
            rec.append("runs", {"preset": preset, "mode": "compiled", "error": first_line(error)})
            continue
        measured = time_steps(models, batches, rounds, steps, ctx.device, dtype)
        rec.append(
            "runs",
            {
                "preset": preset,
                "mode": "compiled",
                "batch": list(batches[0]["labels"].shape),
                "compile_s": compile_s,
                **summarise(measured, models, batches, ceiling),
            },
        )
        del models, batches
        if ctx.on_gpu:
            torch.cuda.empty_cache()


def markdown(result: dict) -> list[str]:
    s = result.get("setup", {})
    lines = [
        f"- bf16 autocast, fused Adam {s.get('fused_adam')}, median of {s.get('rounds')} interleaved rounds x "
        f"{s.get('steps_per_round')} steps; MFU against the measured ceiling of {s.get('ceiling_tflops')} TFLOP/s",
        "",
        "| model | mode | batch | who | target tokens/s | step ms | peak step MiB | peak with state MiB "
        "| TFLOP/s | MFU | ratio ours/Marian tok/s | ratio peak step memory | compile s |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result.get("runs", []):
        if "error" in r:
            lines.append(f"| {r['preset']} | {r['mode']} | - | failed: {r['error']} |||||||||")
            continue
        for who in ("ours", "marian"):
            v = r[who]
            mfu = f"{v['mfu']:.1%}" if v.get("mfu") is not None else "-"
            lines.append(
                f"| {r['preset']} | {r['mode']} | {r['batch'][0]} x {r['batch'][1]} | {who} | "
                f"{v['target_tokens_per_s']:,} | {v['step_ms']} | {v['peak_step_mib']:,} | "
                f"{v['peak_with_state_mib']:,} | {v['tflops']} | {mfu} | "
                f"{r['ratio_tokens_per_s'] if who == 'ours' else ''} | "
                f"{r['ratio_peak_step_memory'] if who == 'ours' else ''} | "
                f"{r.get('compile_s', {}).get(who, '-')} |"
            )
        if r.get("note"):
            lines.append(f"| {r['preset']} | note: {r['note']} ||||||||||||")
    return lines
