"""The shared assets of the command-line contract battery (tests/test_cli_<tool>.py), built once per test session: a
tiny model folder with tokenizer, handler and card, its twin with 32 learned positions, a CTranslate2 export with 24
positions, a tiny Moses corpus and recipe, a finished two-checkpoint training run of it, and a plain input with its
translations.

A pytest plugin: a test file names it in `pytest_plugins = ["cli_assets"]`, so that every file shares the one
session-scoped `assets` fixture (a fixture imported into each file would be built once per file).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from cli_contract import LINES, TRANSLATE_OPTIONS, Assets, run_main, write
from conftest import TINY, write_corpus
from hub_helpers import METRICS, REPO_ID, TRAINING_INFO, make_tiny_model

from vaswani_hf.io import read_lines


def _model_folders(root: Path) -> tuple[Path, Path]:
    """The tiny model (with tokenizer, handler and card) and its learned-position twin, saved under `root`."""
    from vaswani_hf import VaswaniConfig, VaswaniForConditionalGeneration, hub

    model, tokenizer = make_tiny_model()
    model.generation_config.max_length_b = 4  # short outputs: fast decoding for the cases that translate
    folder = root / "model"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    hub.add_handler(folder)
    hub.write_model_card(folder, METRICS, TRAINING_INFO, repo_id=REPO_ID)

    c = model.config
    learned = VaswaniForConditionalGeneration(
        VaswaniConfig(
            vocab_size=c.vocab_size,
            d_model=c.d_model,
            d_ff=c.d_ff,
            num_heads=c.num_heads,
            num_encoder_layers=c.num_encoder_layers,
            num_decoder_layers=c.num_decoder_layers,
            position_encoding="learned",
            max_position_embeddings=32,
        )
    ).eval()
    learned.generation_config = model.generation_config
    learned.save_pretrained(root / "learned")
    tokenizer.save_pretrained(root / "learned")
    return folder, root / "learned"


def _build_assets(root: Path) -> Assets:
    from vaswani_hf.export.ctranslate2_spec import to_ctranslate2

    folder, learned = _model_folders(root)
    to_ctranslate2(folder, root / "ct2", max_positions=24)

    corpus = write_corpus(root / "corpus", n_valid=0)
    recipe = root / "tiny.yaml"
    recipe.write_text(
        yaml.safe_dump(
            {**TINY, "data_dir": str(corpus), "output_dir": str(root / "unused"), "max_steps": 4, "save_steps": 2},
            sort_keys=False,
        ),
        encoding="utf-8",
    )
    run = root / "run"
    code, _ = run_main("train", ["--recipe", recipe, "--output_dir", run])
    assert code == 0 and (run / "checkpoint-2").is_dir() and (run / "checkpoint-4").is_dir()

    assets = Assets(root, folder, learned, root / "ct2", corpus, recipe, run, write(root / "plain.txt", LINES))
    out = root / "plain.translated"
    assert run_main("translate", [assets.plain, "--model", folder, "--output", out, *TRANSLATE_OPTIONS])[0] == 0
    assets.translations = read_lines(out)
    assert len(assets.translations) == len(LINES)
    return assets


@pytest.fixture(scope="session")
def assets(tmp_path_factory) -> Assets:
    """The shared assets, built with one torch thread (as the cases run, under `one_torch_thread`)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _build_assets(tmp_path_factory.mktemp("assets"))
    finally:
        torch.set_num_threads(threads)
