"""Stage 3, host synchronisation: one training step under `torch.cuda.set_sync_debug_mode("error")` after warm-up.

A step that makes the host wait for the GPU (`.item()`, `float(tensor)`, a boolean of a CUDA tensor, a shape that
depends on tensor values) stalls the launch queue every update. The step is the training-step benchmark's (our model,
the paper's label-smoothed objective, bf16 autocast, fused Adam); in error mode the first synchronising call raises,
and its message and the innermost frame of this repository's code are recorded. On a CPU there is nothing to watch
(the mode is CUDA's): the step runs, and the stage says so.
"""

from __future__ import annotations

import traceback

from common import REPO, Context, Recorder, first_line


def our_frame(error: BaseException) -> str | None:
    """The innermost traceback frame inside this repository (where the synchronising call was made)."""
    frames = [
        f
        for f in traceback.extract_tb(error.__traceback__)
        if str(REPO) in f.filename and "benchmarks/gpu" not in f.filename
    ]
    if not frames:
        return None
    f = frames[-1]
    return f"{f.filename.replace(str(REPO) + '/', '')}:{f.lineno} ({f.line})"


def run(ctx: Context, rec: Recorder) -> None:
    import torch
    from bench_training_step import build, make_batch, make_optimizer, smoothing_of, train_step
    from stage_training_step import SMOKE_SIZES

    preset, vocab, rows, length = ("base", 512, 4, 12) if ctx.smoke else ("base", 37000, 64, 32)
    model = build("ours", preset, vocab, **(SMOKE_SIZES if ctx.smoke else {})).to(ctx.device)
    optimizer = make_optimizer(model, torch.device(ctx.device))
    batch = make_batch(rows, length, vocab, device=ctx.device)
    dtype = torch.bfloat16
    for _ in range(2):
        train_step(model, optimizer, batch, smoothing_of("ours"), dtype)
    rec.set(
        "setup",
        {
            "preset": preset,
            "batch": [rows, length],
            "autocast": "bfloat16",
            "fused_adam": ctx.on_gpu,
            "smoke": ctx.smoke,
        },
    )
    if not ctx.on_gpu:
        float(train_step(model, optimizer, batch, smoothing_of("ours"), dtype))
        rec.set("skipped", "no CUDA device: set_sync_debug_mode watches CUDA synchronisations only (the step ran)")
        return
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        loss = train_step(model, optimizer, batch, smoothing_of("ours"), dtype)
        torch.cuda.set_sync_debug_mode(0)
        rec.set("result", "no host synchronisation inside the step")
        rec.set("loss", float(loss))
    except RuntimeError as error:
        torch.cuda.set_sync_debug_mode(0)
        rec.set("result", "the step synchronised with the host")
        rec.set("error", first_line(error))
        rec.set("where", our_frame(error))


def markdown(result: dict) -> list[str]:
    lines = []
    if "setup" in result:
        s = result["setup"]
        size = " (smoke: tiny sizes)" if s.get("smoke") else ""
        lines.append(
            f"- our {s['preset']} model{size}, batch {s['batch'][0]} x {s['batch'][1]}, {s['autocast']} "
            f"autocast, "
            f"fused Adam {s['fused_adam']}, after 2 warm-up steps"
        )
    if "result" in result:
        lines.append(f"- **{result['result']}**")
    if result.get("error"):
        lines.append(f"  - `{result['error']}` at `{result.get('where')}`")
    return lines
