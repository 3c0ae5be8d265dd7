"""Shared fixtures: tiny models, a tiny learnable corpus and recipe, and the location of the Multi30k data (read at
run time, never copied)."""

import os
import random
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
MULTI30K = Path(os.environ.get("VASWANI_MULTI30K_DIR", REPO.parent / "shared" / "data" / "multi30k"))

torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))

# The shared fixtures (a trained translation model, a saved tiny Hub folder, the test Hub server, a headless
# browser): registered here, so that a test names a fixture as an argument and never imports it.
pytest_plugins = ("translation_model", "hub_helpers", "transformers_tests", "browser_helpers")

# The test files that take the most CPU time, heaviest first (measured one file at a time on 2 cores: user + system
# seconds, the processes a file starts included). The parallel run sends each worker whole files (setup.cfg:
# `--dist loadfile`, so that a file's module fixtures are built once, not once per worker) in the order below, then
# every other file in collection order: started first, the long files never keep one worker busy while the other has
# finished. The order only schedules; every test runs whatever this list says, and a file missing from it only
# starts later.
HEAVIEST_FIRST = (
    "test_distributed.py",
    "test_training_run.py",
    "test_space_browser.py",
    "test_space_browser_scale.py",
    "test_transformers_common.py",
    "test_cli_every_tool.py",
)


def pytest_collection_modifyitems(config, items):
    """Puts the files of HEAVIEST_FIRST first, in its order; the tests of a file keep their order."""
    rank = {name: position for position, name in enumerate(HEAVIEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models: one intra-op thread avoids oversubscribing the 2 shared cores (a test module with
    `pytestmark = pytest.mark.usefixtures("one_torch_thread")` runs with it); restored for other modules."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def tiny_config(**overrides):
    from vaswani_hf import VaswaniConfig

    settings = dict(
        vocab_size=64,
        d_model=32,
        d_ff=64,
        num_heads=4,
        num_encoder_layers=2,
        num_decoder_layers=2,
        max_position_embeddings=128,
        dropout=0.0,
    )
    settings.update(overrides)
    return VaswaniConfig(**settings)


def randomize_norms_and_biases(model):
    """Random LayerNorm gains/biases and linear biases, so that equivalence tests exercise every tensor."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                param.normal_(0.0, 0.5)
    return model


@pytest.fixture(scope="module")
def pairs():
    """Synthetic EN-DE sentence pairs written for the tests (data_helpers.synthetic_pairs)."""
    from data_helpers import synthetic_pairs

    return synthetic_pairs()


@pytest.fixture(scope="module")
def tok(pairs):
    """A joint BPE of 500 tokens trained on `pairs`."""
    from vaswani_hf.tokenization import train_bpe_tokenizer

    en, de = pairs
    return train_bpe_tokenizer(en + de, vocab_size=500, min_frequency=1, show_progress=False)


@pytest.fixture
def corpus_dir(tmp_path, pairs):
    """A folder holding `pairs` as Moses files train.en / train.de."""
    from data_helpers import write_text

    en, de = pairs
    write_text(tmp_path / "train.en", en)
    write_text(tmp_path / "train.de", de)
    return tmp_path


@pytest.fixture
def tiny_model():
    from vaswani_hf import VaswaniForConditionalGeneration

    torch.manual_seed(0)
    return VaswaniForConditionalGeneration(tiny_config()).eval()


def padded_batch(lengths, vocab_size=64, pad=0, eos=2, seed=0):
    """Right-padded source ids ending in </s>, with their attention mask: (B, max(lengths))."""
    g = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.full((len(lengths), width), pad, dtype=torch.long)
    for row, n in enumerate(lengths):
        ids[row, : n - 1] = torch.randint(4, vocab_size, (n - 1,), generator=g)
        ids[row, n - 1] = eos
    return ids, (ids != pad).long()


BLOCK_PACKAGE = '''
import sys
class _BlockVaswani:
    """Make `import vaswani_hf` fail, as on a machine where the package is not installed."""
    def find_spec(self, name, path=None, target=None):
        if name == "vaswani_hf" or name.startswith("vaswani_hf."):
            raise ImportError("vaswani_hf is blocked in this process")
        return None
sys.meta_path.insert(0, _BlockVaswani())
sys.path = [p for p in sys.path if p not in ("", ".")]
'''


def run_python(code: str, cwd, env=None, block_package=False, timeout=300):
    """Run `code` in a fresh interpreter (optionally unable to import vaswani_hf); return stdout, fail on error."""
    import subprocess
    import sys

    full_env = dict(os.environ)
    full_env.pop("PYTHONPATH", None)
    full_env.update(env or {})
    source = (BLOCK_PACKAGE if block_package else "") + code
    result = subprocess.run(
        [sys.executable, "-c", source], cwd=str(cwd), env=full_env, capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, f"subprocess failed:\nSTDOUT:\n{result.stdout}\nSTDERR:\n{result.stderr[-4000:]}"
    return result.stdout


# ---------------------------------------------------------------------------------------------------------------------
# A tiny learnable corpus and recipe (training tests)
# ---------------------------------------------------------------------------------------------------------------------


EN = "the a man woman dog cat runs sleeps eats sees big small red blue house tree car ball near under".split()
DE = "der ein mann frau hund katze läuft schläft isst sieht groß klein rot blau haus baum auto ball nahe unter".split()


def write_corpus(folder: Path, n_train: int = 64, n_valid: int = 16, seed: int = 0) -> Path:
    """Word-for-word 'translation' (en word i -> de word i): learnable in a few dozen steps. Unique source lines."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    seen = set()
    splits = {"train": n_train, "valid": n_valid, "test": n_valid}
    for split, n in splits.items():
        src, tgt = [], []
        while len(src) < n:
            ids = [rng.randrange(len(EN)) for _ in range(rng.randint(3, 8))]
            line = " ".join(EN[i] for i in ids)
            if line in seen:
                continue
            seen.add(line)
            src.append(line)
            tgt.append(" ".join(DE[i] for i in ids))
        (folder / f"{split}.en").write_text("\n".join(src) + "\n", encoding="utf-8")
        (folder / f"{split}.de").write_text("\n".join(tgt) + "\n", encoding="utf-8")
    return folder


TINY = {
    "data_format": "moses",
    "train_data": "train",
    "valid_data": None,
    "test_data": None,
    "vocab_size": 300,
    "d_model": 32,
    "d_ff": 64,
    "num_heads": 2,
    "num_encoder_layers": 1,
    "num_decoder_layers": 1,
    "warmup_steps": 4,
    "lr_multiplier": 2.0,
    "max_tokens_per_device": 4096,
    "max_sentences": 8,
    "save_every_minutes": 0.0,
    "keep_last": 0,
    "average_last": 0,
    "logging_steps": 1,
    "eval_steps": 0,
    "translate_examples": [],
    "disable_tqdm": True,
    "torch_threads": 1,
    "seed": 7,
}


def tiny_recipe(tmp_path: Path, **overrides) -> dict:
    corpus = tmp_path / "corpus"
    if not (corpus / "train.en").is_file():
        write_corpus(corpus)
    values = {**TINY, "data_dir": str(corpus), "output_dir": str(tmp_path / "run"), **overrides}
    from vaswani_hf.training.recipe import load_recipe

    return load_recipe("default", values)


def write_recipe_yaml(path: Path, recipe_values: dict) -> Path:
    import yaml

    path.write_text(yaml.safe_dump(recipe_values, sort_keys=False))
    return path


def losses_by_step(output_dir: Path) -> dict[int, float]:
    from vaswani_hf.training.callbacks import read_history

    return {h["step"]: h["loss"] for h in read_history(Path(output_dir) / "history.jsonl") if "loss" in h}
