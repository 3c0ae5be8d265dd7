"""Adam update time: torch's default implementation vs its fused kernel, which `VaswaniTrainer` picks on CPU / CUDA.

`vaswani_hf.training.objective.with_fused_adam` adds `fused=True` to the paper's Adam(0.9, 0.98, 1e-9). On CPU torch's default
is its per-parameter loop (`foreach` is only chosen for CUDA tensors), so this measures, on this machine:
- milliseconds per `optimizer.step()` for the default, `foreach=True` and `fused=True`, on the `multi30k-en-de`
  model (6.0M parameters) and the paper's base model (37k vocabulary), interleaved A B C A B C ... and reported as
  medians and as ratios to the default;
- the largest weight difference between the default and the fused kernel after the timed steps (same gradients).

    python benchmarks/bench_adam.py [--threads 2] [--steps 30] [--rounds 5]

Results: benchmarks/results/adam.json and .md.
"""

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from vaswani_hf import VaswaniConfig, VaswaniForConditionalGeneration
from vaswani_hf.training.objective import with_fused_adam

RESULTS = Path(__file__).resolve().parent / "results"
MODELS = {
    "multi30k-en-de": dict(
        vocab_size=8000, d_model=256, d_ff=512, num_heads=4, num_encoder_layers=3, num_decoder_layers=3
    ),
    "base (37k vocab)": dict(vocab_size=37000),
}
KINDS = ("default", "foreach", "fused")


def make(config: VaswaniConfig, kind: str):
    torch.manual_seed(0)
    model = VaswaniForConditionalGeneration(config)
    gen = torch.Generator().manual_seed(1)
    for p in model.parameters():  # fixed gradients: the update, not the backward pass, is timed
        p.grad = torch.randn(p.shape, generator=gen) * 1e-3
    kwargs = {"lr": 1e-3, "betas": (0.9, 0.98), "eps": 1e-9}
    if kind == "fused":
        kwargs = with_fused_adam(kwargs, model)
        assert kwargs.get("fused") is True
    elif kind == "foreach":
        kwargs["foreach"] = True
    return model, torch.optim.Adam(model.parameters(), **kwargs)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=30, help="timed steps per measurement")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved measurements per implementation")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    results = {
        "threads": args.threads,
        "steps": args.steps,
        "rounds": args.rounds,
        "torch": torch.__version__,
        "models": {},
    }
    for name, sizes in MODELS.items():
        config = VaswaniConfig(**sizes)
        pairs = {kind: make(config, kind) for kind in KINDS}
        for model, opt in pairs.values():  # warm-up: Adam's state is allocated on the first step
            for _ in range(3):
                opt.step()
        times = {kind: [] for kind in KINDS}
        for _ in range(args.rounds):
            for kind in KINDS:
                opt = pairs[kind][1]
                t0 = time.perf_counter()
                for _ in range(args.steps):
                    opt.step()
                times[kind].append((time.perf_counter() - t0) / args.steps * 1000)
        ref = dict(pairs["default"][0].named_parameters())
        diff = max((p - ref[n]).abs().max().item() for n, p in pairs["fused"][0].named_parameters())
        med = {kind: statistics.median(t) for kind, t in times.items()}
        results["models"][name] = {
            "parameters": sum(p.numel() for p in pairs["default"][0].parameters()),
            "ms_per_step_median": med,
            "ms_per_step_all": times,
            "speedup_vs_default": {kind: med["default"] / med[kind] for kind in KINDS},
            "max_abs_weight_diff_fused_vs_default": diff,
            "updates_compared": 3 + args.rounds * args.steps,
        }
        print(name, {k: round(v, 2) for k, v in med.items()}, f"max |diff| {diff:.2e}", flush=True)

    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "adam.json").write_text(json.dumps(results, indent=2) + "\n")
    lines = [
        f"# Adam update: torch default vs fused ({args.threads} threads, medians of {args.rounds} interleaved "
        f"measurements of {args.steps} steps, torch {torch.__version__})",
        "",
        "| model | parameters | default ms/step | foreach ms/step | fused ms/step | fused speed-up | "
        "max weight diff, fused vs default |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in results["models"].items():
        m = r["ms_per_step_median"]
        lines.append(
            f"| {name} | {r['parameters'] / 1e6:.1f}M | {m['default']:.1f} | {m['foreach']:.1f} | "
            f"{m['fused']:.1f} | {r['speedup_vs_default']['fused']:.1f}x | "
            f"{r['max_abs_weight_diff_fused_vs_default']:.1e} after {r['updates_compared']} updates |"
        )
    (RESULTS / "adam.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
