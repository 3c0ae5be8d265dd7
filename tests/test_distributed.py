"""Training on several processes, as users launch it: the README's `accelerate launch` commands with the recipes' own
token batching (no `max_sentences` or other setting that would make the ranks' shards equal), real 2-process DDP over
gloo on the CPU (`ACCELERATE_USE_CPU=1`).

A token batch holds a different number of sentences on each rank, and the validation set is split across ranks, so
evaluation must not assume equal shapes across processes; these tests fail on the transformers evaluation loop, which
gathers every batch with `all_gather` (both processes die at their first evaluation).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vaswani_hf.data.corpora import sample_corpus_path

REPO = Path(__file__).resolve().parent.parent
TRAIN = REPO / "scripts" / "train.py"
ACCELERATE = [sys.executable, "-m", "accelerate.commands.launch"]

pytestmark = pytest.mark.slow


def _env() -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1")
    env.pop("ACCELERATE_USE_CPU", None)
    return env


def _run(command: list[str], cwd: Path, env: dict | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env or _env(), cwd=cwd)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-4000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-4000:]
    return proc


def _two_processes(port: int) -> tuple[list[str], dict]:
    """The README's `ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu --num_processes 2` (a port of its own, so that
    tests never wait for each other's rendezvous)."""
    return [*ACCELERATE, "--multi_gpu", "--num_processes", "2", "--main_process_port", str(port)], dict(
        _env(), ACCELERATE_USE_CPU="1"
    )


def _history(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "history.jsonl").read_text().splitlines() if x.strip()]


def _world_sizes(out: Path) -> list[int]:
    return [json.loads((out / f"run_info_rank{r}.json").read_text())["world_size"] for r in (0, 1)]


def test_readme_two_process_command_trains_evaluates_and_exports(tmp_path):
    """`ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu --num_processes 2 scripts/train.py` on the default recipe
    (shortened from 800 to 120 updates; its batching, evaluation during training and final scoring unchanged) runs to
    the end, evaluates at every `eval_steps`, and exports its Hub folder; the hypotheses of the final validation hold
    every validation sentence once."""
    launch, env = _two_processes(29541)
    out = tmp_path / "outputs" / "default"
    _run(
        [
            *launch,
            str(TRAIN),
            "--output_dir",
            str(out),
            "--max_steps",
            "120",
            "--eval_steps",
            "60",
            "--save_steps",
            "40",
            "--disable_tqdm",
            "true",
        ],
        cwd=tmp_path,
        env=env,
    )
    assert _world_sizes(out) == [2, 2]
    evaluated = [h["step"] for h in _history(out) if "eval_bleu" in h]
    assert evaluated == [60, 120]
    metrics = json.loads((out / "metrics.json").read_text())
    assert {"valid/loss", "valid/bleu", "test/loss", "test/bleu"} <= set(metrics)
    assert metrics["averaged_checkpoints"] == ["checkpoint-40", "checkpoint-80", "checkpoint-120"]
    for name in ("model.safetensors", "config.json", "tokenizer.json", "README.md", "modeling_vaswani.py"):
        assert (out / "hub" / name).is_file(), name
    valid_lines = (sample_corpus_path() / "valid.en").read_text(encoding="utf-8").splitlines()
    assert len((out / "valid_hypotheses.txt").read_text(encoding="utf-8").splitlines()) == len(valid_lines)


def test_short_two_process_run_evaluates_at_the_end(tmp_path):
    """`... scripts/train.py --max_steps 30`: no evaluation during training (the first would be at update 400), the
    final averaged model is scored on validation and test by both processes."""
    launch, env = _two_processes(29542)
    out = tmp_path / "short"
    _run(
        [*launch, str(TRAIN), "--max_steps", "30", "--output_dir", str(out), "--disable_tqdm", "true"],
        cwd=tmp_path,
        env=env,
    )
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["global_step"] == 30 and metrics["world_size"] == 2
    assert metrics["valid/loss"] > 0 and "test/bleu" in metrics and (out / "hub" / "model.safetensors").is_file()


def _uneven_corpus(folder: Path) -> tuple[Path, int]:
    """The sample corpus, with a validation set of an odd number of sentences of very different lengths: 27 sample
    sentences and 4 made of 6 sentences each, so that the token batches of validation hold very different numbers of
    sentences and the two ranks' shards differ in size."""
    folder.mkdir(parents=True)
    sample = sample_corpus_path()
    for split in ("train", "test"):
        for lang in ("en", "de"):
            (folder / f"{split}.{lang}").write_bytes((sample / f"{split}.{lang}").read_bytes())
    lines = {lang: (sample / f"valid.{lang}").read_text(encoding="utf-8").splitlines() for lang in ("en", "de")}
    for lang in ("en", "de"):
        short = lines[lang][:27]
        long = [" ".join(lines[lang][27 + 6 * k : 33 + 6 * k]) for k in range(4)]
        mixed = short[:9] + long[:2] + short[9:18] + long[2:] + short[18:]
        (folder / f"valid.{lang}").write_text("\n".join(mixed) + "\n", encoding="utf-8")
    return folder, 31


def test_two_processes_score_the_same_model_as_one(tmp_path):
    """Uneven validation shards by construction; one process trains; its final scores are removed (a run stopped
    after its last checkpoint, before scoring), and two processes resume it: nothing is trained again, they average
    the same checkpoints and score the same weights: the validation loss per target token, the BLEU and every
    hypothesis, in order, equal the single process's."""
    corpus, n_valid = _uneven_corpus(tmp_path / "corpus")
    out = tmp_path / "run"
    common = [
        str(TRAIN),
        "--data_format",
        "moses",
        "--data_dir",
        str(corpus),
        "--output_dir",
        str(out),
        "--max_steps",
        "400",
        "--save_steps",
        "200",
        "--eval_steps",
        "200",
        "--average_last",
        "2",
        "--disable_tqdm",
        "true",
    ]
    _run([sys.executable, *common], cwd=tmp_path)
    one = json.loads((out / "metrics.json").read_text())
    one_hypotheses = (out / "valid_hypotheses.txt").read_text(encoding="utf-8").splitlines()
    (out / "metrics.json").unlink()

    # The two ranks' validation shards really are uneven (sentences per rank, with the recipe's evaluation budget).
    from vaswani_hf.data.batching import TokenBatchSampler
    from vaswani_hf.data.corpora import load_corpus
    from vaswani_hf.data.preprocessing import prepare_dataset
    from vaswani_hf.tokenization import load_tokenizer

    valid, _ = prepare_dataset(
        load_corpus("moses", corpus / "valid", "en", "de"),
        load_tokenizer(out / "tokenizer"),
        "en",
        "de",
        max_length=None,
        max_ratio=None,
    )
    shards = [
        sum(len(b) for b in TokenBatchSampler.from_dataset(valid, 1024, shuffle=False, num_replicas=2, rank=r))
        for r in (0, 1)
    ]
    assert sum(shards) == n_valid and shards[0] != shards[1], shards

    launch, env = _two_processes(29543)
    _run([*launch, *common, "--resume"], cwd=tmp_path, env=env)
    two = json.loads((out / "metrics.json").read_text())
    assert two["world_size"] == 2 and two["global_step"] == one["global_step"] == 400
    assert two["averaged_checkpoints"] == one["averaged_checkpoints"] == ["checkpoint-200", "checkpoint-400"]
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-200", "checkpoint-400"]  # no update more
    two_hypotheses = (out / "valid_hypotheses.txt").read_text(encoding="utf-8").splitlines()
    assert len(two_hypotheses) == len(one_hypotheses) == n_valid
    assert two_hypotheses == one_hypotheses
    assert two["valid/loss"] == pytest.approx(one["valid/loss"], rel=1e-6)
    assert two["valid/bleu"] == pytest.approx(one["valid/bleu"], abs=1e-9) and one["valid/bleu"] > 1.0
    assert two["test/bleu"] == pytest.approx(one["test/bleu"], abs=1e-9)


def test_fsdp_asked_for_on_the_cpu_is_refused_before_anything_runs(tmp_path):
    """Accelerate turns FSDP on only for GPU back-ends: launched on CPU processes with the FSDP config, a run would
    silently be plain DDP. It is refused in one line of ours (rank 0's; the launcher then reports that its processes
    failed), before any data is read or anything written."""
    _, env = _two_processes(29547)
    launch = [
        *ACCELERATE,
        "--config_file",
        str(REPO / "accelerate_configs" / "fsdp_bf16.yaml"),
        "--num_processes",
        "2",
        "--main_process_port",
        "29547",
    ]
    proc = subprocess.run(
        [*launch, str(TRAIN), "--output_dir", str(tmp_path / "run"), "--max_steps", "2"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode != 0
    ours = [line for line in proc.stderr.splitlines() if line.startswith("train.py: error:")]
    assert len(ours) == 1 and "FSDP was asked for" in ours[0] and "this run is on the CPU" in ours[0], proc.stderr
    assert not (tmp_path / "run").exists()


CONFIGS = REPO / "accelerate_configs"
GPU_ONLY = "# GPUs only:"


def _readme_commands() -> dict[str, list[str]]:
    """The command accelerate_configs/README.md gives for each launch file (its table: file, setup, command)."""
    commands = {}
    for line in (CONFIGS / "README.md").read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`") and cells[0].endswith(".yaml`"):
            command = next(part for part in cells[2].split("`") if part.startswith("accelerate launch"))
            commands[cells[0].strip("`")] = command.split()
    return commands


def _launch_files() -> list[str]:
    return sorted(p.name for p in CONFIGS.glob("*.yaml"))


def test_the_readme_gives_a_command_for_every_launch_file():
    assert sorted(_readme_commands()) == _launch_files()


def _as_run_here(command: list[str], out: Path) -> list[str]:
    """The README's command (written from the repository root) with the repository's paths made absolute, on the
    sample corpus of the default recipe shortened to 4 updates (one checkpoint, the final scoring unchanged)."""
    assert command[:2] == ["accelerate", "launch"], command
    words = [str(REPO / w) if (REPO / w).exists() and "/" in w else w for w in command[2:]]
    return [*ACCELERATE, *words, "--output_dir", str(out), "--max_steps", "4", "--disable_tqdm", "true"]


@pytest.mark.parametrize("name", _launch_files())
def test_every_launch_file_trains_the_processes_it_names(name, tmp_path):
    """Each file of accelerate_configs/ that runs on the CPU, launched as its README writes the command, trains in as
    many processes as the file names (`world_size` in metrics.json), on the CPU. A file whose first line says that it
    needs GPUs is skipped, in so many words (its README command trains a WMT recipe on several GPUs); that Accelerate
    starts its processes is checked below for every file."""
    import yaml

    text = (CONFIGS / name).read_text(encoding="utf-8")
    if text.startswith(GPU_ONLY):
        pytest.skip(f"{name}: {text.splitlines()[0]}")
    out = tmp_path / "run"
    _run(_as_run_here(_readme_commands()[name], out), cwd=tmp_path)
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["world_size"] == yaml.safe_load(text)["num_processes"], metrics
    assert metrics["global_step"] == 4 and metrics["distributed_type"] == "MULTI_CPU"


@pytest.mark.parametrize("name", _launch_files())
def test_accelerate_would_start_as_many_processes_as_each_launch_file_names(name, monkeypatch):
    """On any machine, GPUs or not: the launcher Accelerate picks for each file, given the README's command, starts
    the file's `num_processes` over all its machines (torchrun's processes per machine x machines), never its
    one-process launcher (which a `MULTI_CPU` file without an MPI host file gets). The launcher is stopped where it
    would start the processes; the README's placeholders (machine rank k, HOST0) are filled in."""
    import yaml
    from accelerate.commands import launch

    started = []
    monkeypatch.setattr(
        launch, "_run_torchrun", lambda args: started.append(int(args.nproc_per_node) * args.num_machines)
    )
    monkeypatch.setattr(launch, "simple_launcher", lambda args: started.append(1))
    monkeypatch.setattr("accelerate.utils.launch.is_port_in_use", lambda port: False)
    placeholders = {"k": "0", "HOST0": "127.0.0.1"}
    words = [placeholders.get(w, str(REPO / w) if "/" in w else w) for w in _readme_commands()[name][2:]]
    launch.launch_command(launch.launch_command_parser().parse_args(words))
    assert started == [yaml.safe_load((CONFIGS / name).read_text(encoding="utf-8"))["num_processes"]]
