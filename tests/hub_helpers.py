"""Shared by the tests of vaswani_hf.hub and vaswani_hf.export.marian: a tiny saved model folder with tokenizer,
endpoint handler and card, the loopback Hub test double, and loading by repo id in a fresh interpreter (with or
without the package).

Nothing here reaches huggingface.co: a Hub cache under a temporary HF_HOME with HF_HUB_OFFLINE=1, or
`tests/hub_server.py`, a loopback TEST DOUBLE of the Hub's upload and download endpoints, through the real
`huggingface_hub` client (HF_ENDPOINT is read at import, hence the subprocesses).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hub_server import FakeHubServer
from hub_store import git_blob_sha1

REPO_ROOT = Path(__file__).resolve().parent.parent
REPO_ID = "org/vaswani-base"
SOURCES = ["a man is riding a horse .", "two dogs play in the snow ."]
DECODER_INPUT_IDS = [[0, 5, 6, 7], [0, 8, 9, 10]]
SUBPROCESS_TIMEOUT = 120
SIGNATURE = "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"
METRICS = {  # the shape of the evaluation tool's JSON; values as a real run would report them
    "scores": {
        "sacrebleu": {"score": 12.3456, "signature": SIGNATURE, "description": "sacreBLEU corpus BLEU"},
        "chrf": {"score": 40.1, "signature": "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.6.0"},
    },
    "meta": {"num_segments": 1000},
}
TRAINING_INFO = {
    "source_lang": "en",
    "target_lang": "de",
    "dataset": "bentrevett/multi30k",
    "dataset_name": "Multi30k",
    "steps": 100,
    "hardware": "2 CPU cores",
    "eval_dataset": {"name": "Multi30k test2016", "id": "bentrevett/multi30k", "split": "test"},
}
TRAIN_TEXT = [
    "a man is riding a horse .",
    "ein mann reitet ein pferd .",
    "two dogs play in the snow .",
    "zwei hunde spielen im schnee .",
    "a woman reads a book in the park .",
    "eine frau liest ein buch im park .",
] * 10

# Run in a fresh interpreter: load `repo_id` with transformers' Auto classes and print the results as JSON.
LOADER = r'''
import importlib.abc, json, sys

args = json.loads(sys.argv[1])
if args["block_package"]:
    class _BlockVaswaniHf(importlib.abc.MetaPathFinder):
        """vaswani_hf is pip-installed (editable): make it unimportable, as on a machine without it."""
        def find_spec(self, name, path=None, target=None):
            if name == "vaswani_hf" or name.startswith("vaswani_hf."):
                raise ImportError(f"{name} is blocked in this test")
            return None

    sys.meta_path.insert(0, _BlockVaswaniHf())
    try:
        import vaswani_hf  # noqa: F401
        raise SystemExit("vaswani_hf is importable although it should be blocked")
    except ImportError:
        pass
else:
    import vaswani_hf  # noqa: F401  (registers the classes)

import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

kwargs = {"trust_remote_code": True} if args["trust_remote_code"] else {}
tokenizer = AutoTokenizer.from_pretrained(args["repo_id"], **kwargs)
model = AutoModelForSeq2SeqLM.from_pretrained(args["repo_id"], **kwargs).eval()
batch = tokenizer(args["sources"], return_tensors="pt", padding=True)
with torch.no_grad():
    generated = model.generate(**batch)
    logits = model(**batch, decoder_input_ids=torch.tensor(args["decoder_input_ids"])).logits
print(json.dumps({
    "model_module": type(model).__module__,
    "vaswani_hf_modules": sorted(m for m in sys.modules if m.split(".")[0] == "vaswani_hf"),
    "input_ids": batch["input_ids"].tolist(),
    "generated": generated.tolist(),
    "text": tokenizer.batch_decode(generated, skip_special_tokens=True),
    "logits": logits.tolist(),
}))
'''


def make_tiny_model(seed: int = 0):
    """(model, tokenizer): a random tiny model with a byte-level BPE tokenizer trained on TRAIN_TEXT."""
    from vaswani_hf import VaswaniConfig, VaswaniForConditionalGeneration
    from vaswani_hf.tokenization import train_bpe_tokenizer

    tokenizer = train_bpe_tokenizer(TRAIN_TEXT, vocab_size=300, show_progress=False)
    torch.manual_seed(seed)
    config = VaswaniConfig(
        vocab_size=len(tokenizer),
        d_model=32,
        d_ff=64,
        num_heads=4,
        num_encoder_layers=2,
        num_decoder_layers=2,
        max_position_embeddings=128,
    )
    return VaswaniForConditionalGeneration(config).eval(), tokenizer


def reference_outputs(model, tokenizer) -> dict:
    batch = tokenizer(SOURCES, return_tensors="pt", padding=True)
    with torch.no_grad():
        generated = model.generate(**batch)
        logits = model(**batch, decoder_input_ids=torch.tensor(DECODER_INPUT_IDS)).logits
    return {
        "input_ids": batch["input_ids"].tolist(),
        "generated": generated.tolist(),
        "logits": logits,
        "text": tokenizer.batch_decode(generated, skip_special_tokens=True),
    }


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A saved tiny model + tokenizer + handler + card (save_pretrained, add_handler, write_model_card), and the
    original model's outputs."""
    from vaswani_hf import hub

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny model: one thread is as fast, and far faster on a loaded machine
    folder = tmp_path_factory.mktemp("model")
    model, tokenizer = make_tiny_model()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    hub.add_handler(folder)
    hub.write_model_card(folder, METRICS, TRAINING_INFO, repo_id=REPO_ID)
    outputs = reference_outputs(model, tokenizer)
    yield {"folder": folder, "model": model, "tokenizer": tokenizer, **outputs}
    torch.set_num_threads(threads)


@pytest.fixture
def hub_server():
    with FakeHubServer(max_requests=500) as server:
        yield server
    assert not server.budget_exhausted, "the client sent more requests than the test double's budget"


def copy_folder(folder: Path, target: Path) -> Path:
    shutil.copytree(folder, target)
    return target


def clean_env(**overrides) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_")) and k != "PYTHONPATH"}
    env.update(
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HUB_DISABLE_PROGRESS_BARS="1",
        TOKENIZERS_PARALLELISM="false",
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
    )
    env.update(overrides)
    return env


def run(argv, env, cwd) -> subprocess.CompletedProcess:
    result = subprocess.run(
        argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT, stdin=subprocess.DEVNULL
    )
    assert result.returncode == 0, (
        f"{argv[:3]} failed:\nSTDOUT:\n{result.stdout[-3000:]}\nSTDERR:\n{result.stderr[-5000:]}"
    )
    return result


def load_in_subprocess(tmp_path, env, *, block_package: bool, trust_remote_code: bool, repo_id: str = REPO_ID) -> dict:
    script = tmp_path / "load_by_repo_id.py"
    script.write_text(LOADER, encoding="utf-8")
    args = dict(
        repo_id=repo_id,
        sources=SOURCES,
        decoder_input_ids=DECODER_INPUT_IDS,
        block_package=block_package,
        trust_remote_code=trust_remote_code,
    )
    result = run([sys.executable, str(script), json.dumps(args)], env, cwd=tmp_path)
    assert "Do you wish to run the custom code" not in result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def assert_same_outputs(expected, loaded):
    assert loaded["input_ids"] == expected["input_ids"]
    assert loaded["generated"] == expected["generated"]
    assert loaded["text"] == expected["text"]
    torch.testing.assert_close(torch.tensor(loaded["logits"]), expected["logits"], atol=1e-5, rtol=1e-5)


def place_in_hf_cache(folder: Path, hub_cache: Path, repo_id: str) -> str:
    """Lay `folder` out as huggingface_hub's cache does after a download of `repo_id` at main:
    models--org--name/{blobs/<etag>, snapshots/<commit>/<file> -> ../../blobs/<etag>, refs/main}."""
    repo_dir = hub_cache / f"models--{repo_id.replace('/', '--')}"
    files = sorted(p for p in folder.iterdir() if p.is_file())
    commit = hashlib.sha1("".join(p.name for p in files).encode()).hexdigest()
    snapshot = repo_dir / "snapshots" / commit
    (repo_dir / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for path in files:
        data = path.read_bytes()
        # the etag: sha256 for LFS files (weights), git blob sha1 for regular files
        etag = hashlib.sha256(data).hexdigest() if path.suffix == ".safetensors" else git_blob_sha1(data)
        shutil.copyfile(path, repo_dir / "blobs" / etag)
        (snapshot / path.name).symlink_to(Path("..") / ".." / "blobs" / etag)
    (repo_dir / "refs").mkdir()
    (repo_dir / "refs" / "main").write_text(commit)
    return commit
