"""What the peer benchmark reports: one summary per training run (from its events, its watcher and its checkpoint
scores), the medians over repeated runs per system, a Markdown page and a time-to-BLEU plot."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from peer_systems import DIFFERENCES, LABELS, PEERS

PHASE_ORDER = (
    "data loading",
    "collation",
    "forward + backward",
    "optimizer step",
    "gradient norm",
    "logging",
    "evaluation",
    "checkpoint writes",
    "other",
)


def read_events(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def time_to_bleu(curve: list[dict], target: float, key: str = "greedy") -> float | None:
    """Training minutes at which the curve first reaches `target` (linear between checkpoints), or None."""
    previous = {"minutes": 0.0, key: 0.0}
    for point in curve:
        if point.get(key) is None:
            continue
        if point[key] >= target:
            rise = point[key] - previous[key]
            share = 1.0 if rise <= 0 else (target - previous[key]) / rise
            return round(previous["minutes"] + share * (point["minutes"] - previous["minutes"]), 2)
        previous = point
    return None


def summarize(
    system: str,
    watch: dict,
    events: list[dict],
    curve: list[dict],
    budget_min: float,
    target: float,
    decode_seconds: dict,
) -> dict:
    """One training run: speed, padding, memory, where the time went, and its validation BLEU curve."""
    end = next((e for e in events if e["event"] == "train_end"), None)
    begin = next((e for e in events if e["event"] == "train_begin"), None)
    if end is None or begin is None:
        raise RuntimeError(f"{system}: the training process wrote no train_begin/train_end event")
    loop = end["train_s"]
    phases = {k: round(v, 2) for k, v in end["phases"].items()}
    summary = {
        "system": system,
        "updates": end["step"],
        "train_loop_s": round(loop, 1),
        "tgt_tokens": end["tgt_tokens"],
        "real_tgt_tokens_per_s": round(end["tgt_tokens"] / loop, 1),
        "padded_tgt_slots_per_s": round(end["tgt_slots"] / loop, 1),
        "tgt_tokens_per_update": round(end["tgt_tokens"] / max(1, end["step"]), 1),
        "padding_share_tgt": round(1 - end["tgt_tokens"] / max(1, end["tgt_slots"]), 4),
        "batches": end["batches"],
        "peak_rss_gib": watch["peak_rss_gib"],
        "peak_processes": watch["peak_processes"],
        "launch_to_loop_s": round(begin["wall_time"] - watch["launched_at"], 1),
        "after_loop_s": round(watch["launched_at"] + watch["wall_s"] - end["wall_time"], 1),
        "process_wall_s": watch["wall_s"],
        "phases_s": phases,
        "phases_share": {k: round(v / loop, 4) for k, v in phases.items()},
        "load": {k: watch[k] for k in ("load_before", "load_during", "load_after")},
        "curve": curve,
        "decode_seconds": decode_seconds,
        f"minutes_to_greedy_bleu_{target:g}": time_to_bleu(curve, target),
    }
    for fraction in (0.25, 0.5, 1.0):
        point = min(curve, key=lambda p: abs(p["minutes"] - fraction * budget_min)) if curve else {}
        summary[f"bleu_at_{fraction:g}"] = {
            "minutes": point.get("minutes"),
            "greedy": point.get("greedy"),
            "beam4": point.get("beam4"),
        }
    return summary


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def aggregate(runs: list[dict], target: float) -> dict:
    """Per system: the median of each number over its runs, and the spread of the speed."""
    systems = {}
    for system in dict.fromkeys(r["system"] for r in runs):
        mine = [r for r in runs if r["system"] == system]
        speeds = [r["real_tgt_tokens_per_s"] for r in mine]
        entry = {
            "runs": len(mine),
            "real_tgt_tokens_per_s": _median(speeds),
            "speed_range": [min(speeds), max(speeds)],
            "padded_tgt_slots_per_s": _median([_padded_slots_per_s(r) for r in mine]),
        }
        for key in (
            "updates",
            "padding_share_tgt",
            "peak_rss_gib",
            "tgt_tokens_per_update",
            "launch_to_loop_s",
            f"minutes_to_greedy_bleu_{target:g}",
        ):
            entry[key] = _median([r.get(key) for r in mine])
        for fraction in ("0.25", "0.5", "1"):
            for kind in ("greedy", "beam4"):
                entry[f"{kind}_at_{fraction}"] = _median([r[f"bleu_at_{fraction}"][kind] for r in mine])
        entry["load_during_mean"] = _median([r["load"]["load_during"]["mean"] for r in mine])
        entry["load_during_max"] = max(r["load"]["load_during"]["max"] for r in mine)
        entry["phases_share"] = {k: _median([r["phases_share"].get(k) for r in mine]) for k in PHASE_ORDER}
        systems[system] = entry
    if "ours" in systems:
        for peer in PEERS:
            if peer in systems and systems[peer]["real_tgt_tokens_per_s"]:
                systems["ours"][f"speed_vs_{peer}"] = round(
                    systems["ours"]["real_tgt_tokens_per_s"] / systems[peer]["real_tgt_tokens_per_s"], 3
                )
                systems["ours"][f"slot_speed_vs_{peer}"] = round(
                    systems["ours"]["padded_tgt_slots_per_s"] / systems[peer]["padded_tgt_slots_per_s"], 3
                )
                systems["ours"][f"round_ratios_vs_{peer}"] = round_ratios(runs, peer)
    return systems


def round_ratios(runs: list[dict], peer: str) -> dict:
    """Ours over `peer` within each round (both runs inside the same stretch of time), real tokens and padded
    slots: the spread of the ratio, which the spread of each system's own speed overstates when the machine
    drifts. Runs without speed (none trained) are left out."""
    by_round = {}
    for run in runs:
        by_round.setdefault(run.get("round", 1), {})[run["system"]] = run
    pairs = [
        (r["ours"], r[peer])
        for r in by_round.values()
        if "ours" in r and peer in r and r[peer]["real_tgt_tokens_per_s"] and _padded_slots_per_s(r[peer])
    ]
    return {
        "real": [round(o["real_tgt_tokens_per_s"] / p["real_tgt_tokens_per_s"], 3) for o, p in pairs],
        "slots": [round(_padded_slots_per_s(o) / _padded_slots_per_s(p), 3) for o, p in pairs],
    }


def _padded_slots_per_s(run: dict) -> float:
    """Target slots (real tokens + padding) per second: the step's own speed, whatever the batching wastes. Older
    records lack the field; it follows from the real tokens and the padding share."""
    if run.get("padded_tgt_slots_per_s"):
        return run["padded_tgt_slots_per_s"]
    return round(run["real_tgt_tokens_per_s"] / (1 - run["padding_share_tgt"]), 1)


def _spread(ours: dict, peer: str, kind: str) -> str:
    """ " (rounds 1.05-1.09)": the range of the per-round ratio, where there was more than one round."""
    values = ours.get(f"round_ratios_vs_{peer}", {}).get(kind, [])
    return f" (rounds {min(values):.2f}-{max(values):.2f})" if len(values) > 1 else ""


def _fmt(value, spec="{:.1f}", missing="-"):
    return missing if value is None else spec.format(value)


def _system_table(result: dict, marks: list[str]) -> str:
    """One row per system; the BLEU columns only where checkpoints were scored."""
    target, at, scored = result["target_bleu"], " / ".join(marks), result.get("score", "all") != "none"
    columns = [
        ("runs", lambda s: f"{s['runs']}"),
        ("updates", lambda s: _fmt(s["updates"], "{:,.0f}")),
        (
            "real target tokens/s (range)",
            lambda s: (
                f"{_fmt(s['real_tgt_tokens_per_s'], '{:,.0f}')} "
                f"({s['speed_range'][0]:,.0f}-{s['speed_range'][1]:,.0f})"
            ),
        ),
        ("padded target slots/s", lambda s: _fmt(s.get("padded_tgt_slots_per_s"), "{:,.0f}")),
        ("target tokens/update", lambda s: _fmt(s["tgt_tokens_per_update"], "{:,.0f}")),
        ("padding", lambda s: _fmt(s["padding_share_tgt"], "{:.1%}")),
        ("peak RSS", lambda s: _fmt(s["peak_rss_gib"], "{:.2f} GiB")),
        ("launch to training loop", lambda s: _fmt(s["launch_to_loop_s"], "{:.0f} s")),
    ]
    if scored:
        columns += [
            (
                f"{kind} BLEU at {at} min",
                lambda s, k=key: " / ".join(_fmt(s[f"{k}_at_{f}"], "{:.2f}") for f in ("0.25", "0.5", "1")),
            )
            for kind, key in (("greedy", "greedy"), ("beam-4", "beam4"))
        ]
        columns.append(
            (
                f"minutes to greedy {target:g}",
                lambda s: _fmt(s[f"minutes_to_greedy_bleu_{target:g}"], "{:.1f}", "not reached"),
            )
        )
    columns.append(("load during (mean, max)", lambda s: f"{s['load_during_mean']:.1f}, {s['load_during_max']:.1f}"))
    rows = ["| system | " + " | ".join(name for name, _ in columns) + " |", "|" + "---|" * (len(columns) + 1)]
    for system, s in result["systems"].items():
        rows.append(f"| {LABELS[system]} | " + " | ".join(cell(s) for _, cell in columns) + " |")
    return "\n".join(rows)


def markdown(result: dict) -> str:
    budget = result["minutes"]
    marks = [f"{budget * f:g}" for f in (0.25, 0.5, 1.0)]
    ours = result["systems"].get("ours", {})
    ratios = ", ".join(
        f"{ours[f'speed_vs_{p}']:.2f}x {p}{_spread(ours, p, 'real')}" for p in PEERS if f"speed_vs_{p}" in ours
    )
    slot_ratios = ", ".join(
        f"{ours[f'slot_speed_vs_{p}']:.2f}x {p}{_spread(ours, p, 'slots')}"
        for p in PEERS
        if f"slot_speed_vs_{p}" in ours
    )
    phase_rows = [
        "| system | launch to loop | " + " | ".join(PHASE_ORDER) + " | after the loop |",
        "|" + "---|" * (len(PHASE_ORDER) + 3),
    ]
    for system, s in result["systems"].items():
        cells = [_fmt(s["phases_share"].get(k), "{:.1%}") for k in PHASE_ORDER]
        after = _median([r["after_loop_s"] for r in result["runs"] if r["system"] == system])
        phase_rows.append(
            f"| {system} | {_fmt(s['launch_to_loop_s'], '{:.0f} s')} | "
            + " | ".join(cells)
            + f" | {_fmt(after, '{:.0f} s')} |"
        )
    differences = "\n".join(f"- **{s}**: {DIFFERENCES[s]}" for s in result["systems"])
    title = "# Peers: ours against eole and the Seq2SeqTrainer + MarianMTModel path, end to end"
    return (
        "\n\n".join(
            part
            for part in [
                title,
                _intro(result, marks),
                _system_table(result, marks),
                (
                    "Real target tokens per second: non-padding target tokens (end of sentence included) over "
                    f"the training loop's wall time. Ours: **{ratios or 'no peer ran'}**. Padded target slots "
                    "per second (real tokens + padding: the training step's own speed, whatever the batching "
                    f"wastes): ours {slot_ratios or '-'}. The first ratio is what a user gets from each tool as "
                    "configured here; the second separates the step from the batching."
                ),
                "## Where the time goes (share of the training loop; medians)",
                "\n".join(phase_rows),
                (
                    '"launch to loop": process start to the first batch (imports, data, model); "after the '
                    'loop": final checkpoint to exit (ours: also the Hub folder export). Data loading includes '
                    'collation; "other" is the loop minus every named phase.'
                ),
                _decode_table(result),
                _ours_before_loop(result),
                "## What is not the same",
                differences,
                "## Machine",
                _machine(result),
                _readme_row(result),
            ]
            if part
        )
        + "\n"
    )


def _decode_table(result: dict) -> str:
    """Seconds to decode the validation set with one checkpoint, per system (only where checkpoints were scored)."""
    if result.get("score") == "none":
        return ""
    rows = [
        "Evaluation with generation is outside the loop here, one validation pass per checkpoint (incl. process "
        "start for the peers):",
        "",
        "| system | greedy, one checkpoint (s) | beam 4, one checkpoint (s) |",
        "|---|---|---|",
    ]
    for system in result["systems"]:
        mine = [r["decode_seconds"] for r in result["runs"] if r["system"] == system]
        rows.append(
            f"| {system} | {_fmt(_median([_median(d.get('greedy', [])) for d in mine]), '{:.0f}')} | "
            f"{_fmt(_median([_median(d.get('beam4', [])) for d in mine]), '{:.0f}')} |"
        )
    return "\n".join(rows)


def _readme_row(result: dict) -> str:
    """The row for the README's results table, from these numbers."""
    systems = result["systems"]
    ours = systems.get("ours")
    if not ours or not any(f"speed_vs_{p}" in ours for p in PEERS):
        return ""
    names = {"eole": "eole", "marian": "the Marian path", "marian-target": "the Marian path grouped by target"}
    speed = ", ".join(f"**{ours[f'speed_vs_{p}']:.2f}x** {names[p]}'s" for p in PEERS if f"speed_vs_{p}" in ours)
    bleu = "; ".join(
        f"{name} {_fmt(s['greedy_at_0.5'], '{:.1f}')} / {_fmt(s['greedy_at_1'], '{:.1f}')}"
        for name, s in systems.items()
    )
    slots = ", ".join(f"{ours[f'slot_speed_vs_{p}']:.2f}x {p}" for p in PEERS if f"slot_speed_vs_{p}" in ours)
    machine = result["machine"]
    rounds = max((s["runs"] for s in systems.values()), default=1)
    quality = (
        ""
        if result.get("score") == "none"
        else f"; validation BLEU (greedy) at {result['minutes'] / 2:g} / {result['minutes']:g} min: {bleu}"
    )
    return (
        f"README row: | training end to end vs eole and Seq2SeqTrainer + MarianMTModel (Multi30k, "
        f"{result['minutes']:g} min each, {rounds} round(s), {result['threads']} threads, {machine['cpu_model']}"
        f"{', ' + machine['vector_isa'] if machine.get('vector_isa') else ''}) | "
        f"{speed} real target tokens/s (per padded slot: {slots}){quality} | "
        f"[peers](benchmarks/results/{result.get('page', 'peers.md')}) |"
    )


def _ours_before_loop(result: dict) -> str:
    """Our launch, stage by stage (our run's own run_clock, first run of ours)."""
    clock = next((r.get("run_clock") for r in result["runs"] if r["system"] == "ours" and r.get("run_clock")), None)
    if not clock:
        return ""
    stages = clock["stages"]
    first = next(iter(stages.values()))
    parts = [f"imports and start-up {first['at_s'] - first['seconds']:.1f} s"]
    parts += [f"{name} {stage['seconds']:.1f} s" for name, stage in stages.items() if name != "training"]
    return (
        "Ours, launch to loop and after it, by our run's own clock (run_clock, first run): " + ", ".join(parts) + "."
    )


def _intro(result: dict, marks: list[str]) -> str:
    spec, data = result["spec"], result["data"]
    return (
        f"{result['title_note']}`python benchmarks/bench_peers.py {result['command']}` ({result['date']}). "
        f"Each system trains the same model (d_model {spec['d_model']}, d_ff {spec['d_ff']}, {spec['num_heads']} "
        f"heads, {spec['num_encoder_layers']}+{spec['num_decoder_layers']} layers, dropout {spec['dropout']}, "
        f"label smoothing {spec['label_smoothing']}, Adam(0.9, 0.98, 1e-9), the paper's schedule with warmup "
        f"{spec['warmup_steps']}, ~{spec['max_tokens']:,} target tokens per batch) on the same "
        f"{data['train_pairs']:,} training pairs and the same joint BPE of {data['vocab_size']:,} subwords, for "
        f"{result['minutes']:g} minutes of training loop, {result['threads']} threads, one system at a time, each "
        f"in its own virtual environment. {_scoring(result, marks)} Numbers are medians over the runs (runs: "
        f"the .json beside this page); {_order(result)}"
    )


def _order(result: dict) -> str:
    """How the runs were ordered: rounds interleave the systems; each ratio's range is over the rounds."""
    rounds = sorted({r.get("round", 1) for r in result["runs"]})
    if len(rounds) < 2:
        return "one run per system, one after the other."
    orders = []
    for index in rounds:
        mine = [r for r in result["runs"] if r.get("round", 1) == index]
        if all(r.get("started") for r in mine):
            mine.sort(key=lambda r: r["started"])
        orders.append(", ".join(r["system"] for r in mine))
    return (
        f"{len(rounds)} rounds, each running every system once, in the order "
        + "; ".join(orders)
        + ". Each ratio's range is over the rounds (ours over the peer within a round)."
    )


def _scoring(result: dict, marks: list[str]) -> str:
    if result.get("score") == "none":
        return "Speed only: no checkpoint is scored (`--score none`; the 40-minute round is the quality reading)."
    data = result["data"]
    return (
        f"Checkpoints every {result['minutes'] / result['checkpoints']:g} minutes are scored after training "
        f"(not in the budget) on {data['valid_pairs']:,} validation sentences: greedy at every checkpoint, beam "
        f"4 at {', '.join(marks)} minutes. BLEU is sacreBLEU with tokenize=none on the lowercased tokenized "
        "references, the same call for every system, on text detokenized by the same tokenizer."
    )


def _machine(result: dict) -> str:
    machine = result["machine"]
    isa = f", {machine['vector_isa']}{' with AMX' if machine.get('amx') else ''}" if machine.get("vector_isa") else ""
    return (
        f"{machine['cpus']} CPUs ({machine['cpu_model']}{isa}), {machine['platform']}; load average before "
        f"the first run {machine['load_at_start']}; the load column is the 1-minute load average sampled every "
        "15 s during training (on a quiet 2-core machine about 2 while one system trains with 2 threads). "
        f"Versions: {json.dumps(result['versions'])}."
    )


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    colours = {"ours": "tab:red", "eole": "tab:blue", "marian": "tab:green", "marian-target": "tab:olive"}
    for system in result["systems"]:
        for i, run in enumerate(r for r in result["runs"] if r["system"] == system):
            curve = run["curve"]
            ax.plot(
                [p["minutes"] for p in curve],
                [p["greedy"] for p in curve],
                "o-",
                ms=3,
                lw=1,
                color=colours[system],
                alpha=0.8,
                label=f"{LABELS[system]}, greedy" if i == 0 else None,
            )
            beams = [p for p in curve if p.get("beam4") is not None]
            ax.plot(
                [p["minutes"] for p in beams],
                [p["beam4"] for p in beams],
                "*",
                ms=9,
                color=colours[system],
                label=f"{system}, beam 4" if i == 0 else None,
            )
    ax.axhline(result["target_bleu"], color="gray", ls="--", lw=1, label=f"target {result['target_bleu']:g}")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.set_xlabel(f"minutes of training loop ({result['threads']} threads, one system at a time)")
    ax.set_ylabel("validation BLEU (tokenize=none)")
    ax.set_title("Time to BLEU: the same model, data and subwords in each toolkit")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
