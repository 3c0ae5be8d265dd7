"""A tiny trained translation model shared by tests/test_inference.py and tests/test_pipeline.py (import the fixtures
into a test module to use them).

The model is tiny (d_model=32, 2+2 layers) and trained for a few seconds on a copy task, so that its translations
depend on the input (random weights translate everything to the same string, which could hide an order bug).
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
WORDS = (
    "man dog woman child ball street red blue green big small runs jumps sits plays "
    "in on the a with near water park snow"
).split()
SUBPROCESS_ENV = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "HF_HUB_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}
# Lines of varied lengths in a non-sorted order, with empty and whitespace-only lines and surrounding spaces.
LINES = [
    "a man runs in the park",
    "",
    "dog",
    "   ",
    "the big red ball near water with a child",
    "  woman sits  ",
    "\t",
    "snow",
    "blue green",
    "a small dog jumps on the street",
]


def sentences(n, seed):
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 7))) for _ in range(n)]


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models on a shared 2-core machine: one thread avoids oversubscription (10x slower when loaded)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def train_tokenizer():
    from vaswani_hf.tokenization import train_bpe_tokenizer

    return train_bpe_tokenizer(sentences(400, 0), vocab_size=300, show_progress=False)


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer()


def train_copy_model(tokenizer):
    """A tiny Transformer trained ~150 steps to copy its input (enough for input-dependent outputs), with one torch
    thread (as fast for a model this size, and the same weights whatever thread count the calling module uses)."""
    from vaswani_hf import VaswaniConfig, VaswaniForConditionalGeneration

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(0)
        config = VaswaniConfig(
            vocab_size=len(tokenizer),
            d_model=32,
            d_ff=64,
            num_heads=4,
            num_encoder_layers=2,
            num_decoder_layers=2,
            dropout=0.0,
        )
        model = VaswaniForConditionalGeneration(config)
        optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
        data = sentences(2000, 1)
        model.train()
        for step in range(150):
            batch = data[(step * 32) % len(data) :][:32]
            enc = tokenizer(batch, text_target=batch, padding=True, return_tensors="pt")
            labels = enc["labels"].masked_fill(enc["labels"] == tokenizer.pad_token_id, -100)
            loss = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"], labels=labels).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    finally:
        torch.set_num_threads(threads)
    return model.eval()


@pytest.fixture(scope="session")
def copy_task_weights():
    """The copy-task training, done once per test process (each pytest-xdist worker) instead of once per module that
    uses `model` (7 modules, ~7 CPU seconds each): its config and weights, from which each module builds its own
    model, so that no module sees what another changed on its model."""
    trained = train_copy_model(train_tokenizer())
    return trained.config.to_dict(), {name: tensor.clone() for name, tensor in trained.state_dict().items()}


@pytest.fixture(scope="module")
def model(tokenizer, copy_task_weights):
    """A tiny Transformer trained ~150 steps to copy its input (train_copy_model), this module's own object."""
    from vaswani_hf import VaswaniConfig, VaswaniForConditionalGeneration

    config, weights = copy_task_weights
    model = VaswaniForConditionalGeneration(VaswaniConfig.from_dict(config))
    model.load_state_dict(weights)
    return model.eval()


@pytest.fixture(scope="module")
def saved_folder(model, tokenizer, tmp_path_factory):
    from vaswani_hf.translation.inference import save_pretrained_with_pipeline

    folder = tmp_path_factory.mktemp("vaswani_model")
    save_pretrained_with_pipeline(model, tokenizer, folder)
    return folder
