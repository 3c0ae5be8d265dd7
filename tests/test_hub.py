"""Hub integration (issue 6): loading by repo id with and without the package, push round trip, card, Marian export.

Nothing here reaches huggingface.co. Cases 1-2 read a Hub cache layout under a temporary HF_HOME with
HF_HUB_OFFLINE=1; case 3 talks to `tests/hub_server.py`, a loopback TEST DOUBLE of the Hub's upload and download
endpoints, through the real `huggingface_hub` client (HF_ENDPOINT is read at import, hence the subprocesses).
"""

import hashlib
import importlib.util
import io
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from huggingface_hub import ModelCard, ModelCardData
from transformers import AutoTokenizer, MarianMTModel

import vaswani_hf
from vaswani_hf import VaswaniConfig, VaswaniForConditionalGeneration, hub
from vaswani_hf.tokenization import train_bpe_tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hub_server import TEST_TOKEN, FakeHubServer, git_blob_sha1  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent
REPO_ID = "org/vaswani-base"
SOURCES = ["a man is riding a horse .", "two dogs play in the snow ."]
DECODER_INPUT_IDS = [[0, 5, 6, 7], [0, 8, 9, 10]]
SUBPROCESS_TIMEOUT = 120
# One intra-op thread: on the shared 2-core machine, two threads contending with other jobs make a tiny model's
# generate() 10-40x slower.
torch.set_num_threads(1)
SIGNATURE = "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"
METRICS = {  # the shape of scripts/evaluate.py's JSON; values as a real run would report them
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
    "a man is riding a horse .", "ein mann reitet ein pferd .",
    "two dogs play in the snow .", "zwei hunde spielen im schnee .",
    "a woman reads a book in the park .", "eine frau liest ein buch im park .",
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


# ----------------------------------------------------------------------------------------------------------------------
# fixtures and helpers
# ----------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A saved tiny model + tokenizer + handler + card, and the original model's outputs."""
    folder = tmp_path_factory.mktemp("model")
    tokenizer = train_bpe_tokenizer(TRAIN_TEXT, vocab_size=300, show_progress=False)
    torch.manual_seed(0)
    config = VaswaniConfig(vocab_size=len(tokenizer), d_model=32, d_ff=64, num_heads=4, num_encoder_layers=2,
                           num_decoder_layers=2, max_position_embeddings=128)
    model = VaswaniForConditionalGeneration(config).eval()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    hub.add_handler(folder)
    hub.write_model_card(folder, METRICS, TRAINING_INFO, repo_id=REPO_ID)
    batch = tokenizer(SOURCES, return_tensors="pt", padding=True)
    with torch.no_grad():
        generated = model.generate(**batch)
        logits = model(**batch, decoder_input_ids=torch.tensor(DECODER_INPUT_IDS)).logits
    return {
        "folder": folder, "model": model, "tokenizer": tokenizer,
        "input_ids": batch["input_ids"].tolist(), "generated": generated.tolist(), "logits": logits,
        "text": tokenizer.batch_decode(generated, skip_special_tokens=True),
    }


def clean_env(**overrides) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_")) and k != "PYTHONPATH"}
    env.update(HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_DISABLE_PROGRESS_BARS="1", TOKENIZERS_PARALLELISM="false",
               OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env.update(overrides)
    return env


def run(argv, env, cwd) -> subprocess.CompletedProcess:
    result = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT,
                            stdin=subprocess.DEVNULL)
    assert result.returncode == 0, (
        f"{argv[:3]} failed:\nSTDOUT:\n{result.stdout[-3000:]}\nSTDERR:\n{result.stderr[-5000:]}")
    return result


def load_in_subprocess(tmp_path, env, *, block_package: bool, trust_remote_code: bool) -> dict:
    script = tmp_path / "load_by_repo_id.py"
    script.write_text(LOADER, encoding="utf-8")
    args = dict(repo_id=REPO_ID, sources=SOURCES, decoder_input_ids=DECODER_INPUT_IDS,
                block_package=block_package, trust_remote_code=trust_remote_code)
    result = run([sys.executable, str(script), json.dumps(args)], env, cwd=tmp_path)
    assert "Do you wish to run the custom code" not in result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def assert_same_outputs(tiny, loaded):
    assert loaded["input_ids"] == tiny["input_ids"]
    assert loaded["generated"] == tiny["generated"]
    assert loaded["text"] == tiny["text"]
    torch.testing.assert_close(torch.tensor(loaded["logits"]), tiny["logits"], atol=1e-5, rtol=1e-5)


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


def load_script(name: str):
    spec = importlib.util.spec_from_file_location(f"_script_{name}", REPO_ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ----------------------------------------------------------------------------------------------------------------------
# cases 1 and 2: a Hub cache, offline, with and without the package
# ----------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def offline_home(tiny, tmp_path_factory):
    home = tmp_path_factory.mktemp("hf_home")
    place_in_hf_cache(tiny["folder"], home / "hub", REPO_ID)
    return home


@pytest.mark.slow
def test_offline_cache_remote_code_without_package(tiny, offline_home, tmp_path):
    # A closed port as endpoint: any request that slipped past HF_HUB_OFFLINE would fail loudly.
    env = clean_env(HF_HOME=str(offline_home), HF_HUB_OFFLINE="1", HF_ENDPOINT="http://127.0.0.1:9")
    loaded = load_in_subprocess(tmp_path, env, block_package=True, trust_remote_code=True)
    assert loaded["model_module"].startswith("transformers_modules."), loaded["model_module"]
    assert loaded["vaswani_hf_modules"] == []
    assert_same_outputs(tiny, loaded)


@pytest.mark.slow
def test_offline_cache_with_package_without_trust_remote_code(tiny, offline_home, tmp_path):
    env = clean_env(HF_HOME=str(offline_home), HF_HUB_OFFLINE="1", HF_ENDPOINT="http://127.0.0.1:9")
    loaded = load_in_subprocess(tmp_path, env, block_package=False, trust_remote_code=False)
    assert loaded["model_module"] == "vaswani_hf.modeling_vaswani"
    assert_same_outputs(tiny, loaded)


# ----------------------------------------------------------------------------------------------------------------------
# case 3: push round trip through the real client against the loopback test double
# ----------------------------------------------------------------------------------------------------------------------


@pytest.fixture
def hub_server():
    with FakeHubServer(max_requests=500) as server:
        yield server
    assert not server.budget_exhausted, "the client sent more requests than the test double's budget"


def test_dry_run_lists_exactly_the_uploaded_files_and_makes_no_request(tiny, hub_server, monkeypatch, capsys):
    folder = tiny["folder"]
    (folder / "pytorch_model.bin").write_bytes(b"pickled")  # never uploaded
    (folder / "checkpoint-10").mkdir(exist_ok=True)
    try:
        load_script("push_to_hub").main(["--model_dir", str(folder), "--repo_id", REPO_ID, "--dry_run"])
    finally:
        (folder / "pytorch_model.bin").unlink()
        (folder / "checkpoint-10").rmdir()
    out = capsys.readouterr().out
    listed = [line.split()[:2] for line in out.splitlines() if line.startswith("  ")]
    expected = hub.list_upload_files(folder)
    assert listed == [[name, str(size)] for name, size in expected]
    names = {name for name, _ in expected}
    assert {"model.safetensors", "config.json", "generation_config.json", "configuration_vaswani.py",
            "modeling_vaswani.py", "beam_search_vaswani.py", "tokenizer.json", "tokenizer_config.json", "README.md",
            "metrics.json", "handler.py"} <= names
    assert "pytorch_model.bin" not in names and "not uploaded: checkpoint-10/, pytorch_model.bin" in out
    assert hub_server.requests == []


def test_push_refuses_an_incomplete_folder(tiny, tmp_path):
    folder = tmp_path / "incomplete"
    shutil.copytree(tiny["folder"], folder)
    (folder / "README.md").unlink()
    (folder / "configuration_vaswani.py").unlink()
    with pytest.raises(ValueError) as error:
        hub.push_folder(folder, REPO_ID, dry_run=True, out=io.StringIO())
    assert "README.md" in str(error.value) and "configuration_vaswani.py" in str(error.value)


@pytest.mark.slow
def test_push_round_trip_through_local_test_double(tiny, hub_server, tmp_path):
    folder = tiny["folder"]
    env = clean_env(HF_ENDPOINT=hub_server.endpoint, HF_TOKEN=TEST_TOKEN, HF_HOME=str(tmp_path / "pusher_home"),
                    HF_HUB_DISABLE_XET="1")
    pushed = run([sys.executable, str(REPO_ROOT / "scripts" / "push_to_hub.py"), "--model_dir", str(folder),
                  "--repo_id", REPO_ID, "--commit_message", "Upload tiny model"], env, cwd=tmp_path)
    assert TEST_TOKEN not in pushed.stdout + pushed.stderr

    assert hub_server.unhandled == []
    assert hub_server.history(REPO_ID) == ["Upload tiny model", "initial commit"]  # one commit with everything
    remote = hub_server.files(REPO_ID)
    expected = dict(hub.list_upload_files(folder))
    assert set(remote) == set(expected) | {".gitattributes"}
    for name in expected:
        assert hub_server.hub.content(remote[name]) == (folder / name).read_bytes(), name
    assert remote["model.safetensors"]["lfs"] and not remote["config.json"]["lfs"]
    assert ("POST", f"/{REPO_ID}.git/info/lfs/objects/batch") in hub_server.requests

    # download by repo id through the same server, on a "machine" without vaswani_hf
    hub_server.requests.clear()
    env = clean_env(HF_ENDPOINT=hub_server.endpoint, HF_HOME=str(tmp_path / "user_home"), HF_HUB_DISABLE_XET="1")
    loaded = load_in_subprocess(tmp_path, env, block_package=True, trust_remote_code=True)
    assert loaded["model_module"].startswith("transformers_modules.")
    assert_same_outputs(tiny, loaded)
    assert hub_server.unhandled == []
    assert any(path.endswith("/resolve/" + hub_server.hub.repos[REPO_ID].branches["main"] + "/model.safetensors")
               for _, path in hub_server.requests)


@pytest.mark.slow
def test_push_private_to_a_branch(tiny, hub_server, tmp_path):
    env = clean_env(HF_ENDPOINT=hub_server.endpoint, HF_TOKEN=TEST_TOKEN, HF_HOME=str(tmp_path / "home"),
                    HF_HUB_DISABLE_XET="1")
    run([sys.executable, str(REPO_ROOT / "scripts" / "push_to_hub.py"), "--model_dir", str(tiny["folder"]),
         "--repo_id", "org/vaswani-private", "--private", "--revision", "dev"], env, cwd=tmp_path)
    repo = hub_server.hub.repos["org/vaswani-private"]
    assert repo.private
    assert hub_server.history("org/vaswani-private", "main") == ["initial commit"]
    assert len(hub_server.history("org/vaswani-private", "dev")) == 2
    assert "model.safetensors" in hub_server.files("org/vaswani-private", "dev")
    assert hub_server.unhandled == []


def test_push_without_token_fails_clearly(tiny, monkeypatch, tmp_path):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr("huggingface_hub.get_token", lambda: None)
    with pytest.raises(RuntimeError, match="HF_TOKEN"):
        hub.push_folder(tiny["folder"], REPO_ID, out=io.StringIO())


# ----------------------------------------------------------------------------------------------------------------------
# case 4: the card
# ----------------------------------------------------------------------------------------------------------------------


def test_card_metadata_is_valid_and_carries_the_real_metrics(tiny, hub_server, monkeypatch):
    text = (tiny["folder"] / "README.md").read_text(encoding="utf-8")
    card = ModelCard(text)  # parses the YAML header into ModelCardData (raises on invalid metadata)
    # huggingface_hub's validation posts the card to {ENDPOINT}/api/validate-yaml: here the test double, which only
    # parses it again; the Hub's own, stricter validation runs on push (only the real Hub can confirm it).
    monkeypatch.setattr("huggingface_hub.repocard.constants.ENDPOINT", hub_server.endpoint)
    card.validate()
    assert ("POST", "/api/validate-yaml") in hub_server.requests
    data = card.data
    assert isinstance(data, ModelCardData)
    assert data.language == ["en", "de"] and data.license == "apache-2.0"
    assert data.library_name == "transformers" and data.pipeline_tag == "translation"
    assert data.datasets == ["bentrevett/multi30k"] and set(data.metrics) == {"sacrebleu", "chrf"}
    assert "custom_code" in data.tags
    assert [w["text"] for w in data.widget] and all(isinstance(w["text"], str) for w in data.widget)
    # model-index round trip: the given numbers, rounded to 2 decimals, with the test set and signature
    assert data.model_name == "vaswani-base"
    results = {r.metric_type: r for r in data.eval_results}
    assert results["sacrebleu"].metric_value == 12.35 and results["chrf"].metric_value == 40.1
    assert results["sacrebleu"].metric_config == SIGNATURE
    assert all(r.task_type == "translation" and r.dataset_name == "Multi30k test2016" and r.dataset_split == "test"
               for r in data.eval_results)
    assert ModelCardData(**data.to_dict()).to_dict() == data.to_dict()
    # body: architecture from the model, scores with signature, both loading ways, citation
    params = hub.count_parameters(tiny["model"])
    assert params == hub.count_parameters_in_folder(tiny["folder"])
    assert f"| Parameters | {params:,} |" in text
    assert "| d_model | 32 |" in text and "| Attention heads, h | 4 |" in text
    assert "| sacreBLEU | 12.35 |" in text and SIGNATURE.replace("|", "\\|") in text
    assert f'AutoModelForSeq2SeqLM.from_pretrained("{REPO_ID}", trust_remote_code=True)' in text
    assert "import vaswani_hf" in text and "@inproceedings{vaswani2017attention" in text
    assert json.loads((tiny["folder"] / "metrics.json").read_text())["metrics"]["sacrebleu"]["score"] == 12.3456


def test_card_without_metrics_has_no_results_and_invents_none(tiny):
    card = hub.render_model_card(tiny["folder"], None, {"source_lang": "en", "target_lang": "de"})
    assert card.data.eval_results is None and card.data.metrics is None
    assert "model-index" not in str(card)
    assert "No evaluation results were recorded" in str(card)
    assert "No training details were recorded" in str(card)


@pytest.mark.parametrize("bad", [{"bleu": float("nan")}, {"bleu": "TBD"}, {"bleu": None}, {"bleu": {"signature": "x"}}])
def test_card_refuses_placeholder_metrics(tiny, bad):
    with pytest.raises(ValueError):
        hub.render_model_card(tiny["folder"], bad, TRAINING_INFO)


def test_card_refuses_metrics_without_test_set_or_languages(tiny):
    with pytest.raises(ValueError, match="eval_dataset"):
        hub.render_model_card(tiny["folder"], {"bleu": 20.0}, {"source_lang": "en", "target_lang": "de"})
    with pytest.raises(ValueError, match="source_lang"):
        hub.render_model_card(tiny["folder"], None, {})


def test_trainer_style_metrics_are_normalized():
    scores = hub.normalize_metrics({"eval_bleu": 20.5, "eval_loss": 2.0, "eval_gen_len": 9.0, "eval_runtime": 3.0})
    assert scores == {"bleu": {"score": 20.5, "signature": None, "description": None}}
    assert math.isfinite(scores["bleu"]["score"])


# ----------------------------------------------------------------------------------------------------------------------
# case 5: native Marian export; the Inference Endpoints handler
# ----------------------------------------------------------------------------------------------------------------------


def test_marian_export_loads_natively_and_matches(tiny, tmp_path):
    out = tmp_path / "marian"
    load_script("export_marian").main(["--model_dir", str(tiny["folder"]), "--out", str(out),
                                       "--repo_id", "org/vaswani-base-marian"])
    marian = MarianMTModel.from_pretrained(out).eval()
    assert type(marian) is MarianMTModel and marian.config.model_type == "marian"
    tokenizer = AutoTokenizer.from_pretrained(out)  # our tokenizer.json, not Marian's SentencePiece tokenizer
    assert json.loads((out / "tokenizer_config.json").read_text())["tokenizer_class"] == "PreTrainedTokenizerFast"
    batch = tokenizer(SOURCES, return_tensors="pt", padding=True)
    assert batch["input_ids"].tolist() == tiny["input_ids"]
    with torch.no_grad():
        logits = marian(**batch, decoder_input_ids=torch.tensor(DECODER_INPUT_IDS)).logits
        # Marian reloads its LayerNorms with eps 1e-5 (ours 1e-6): differences ~1e-5
        torch.testing.assert_close(logits, tiny["logits"], atol=1e-4, rtol=1e-4)
        greedy_marian = marian.generate(**batch, num_beams=1, max_new_tokens=12)
        greedy_ours = tiny["model"].generate(**batch, num_beams=1, max_new_tokens=12, max_length_b=None)
    assert greedy_marian.tolist() == greedy_ours.tolist()
    card = ModelCard((out / "README.md").read_text(encoding="utf-8"))
    assert card.data.pipeline_tag == "translation" and card.data.library_name == "transformers"
    assert "marian" in card.data.tags and "custom_code" not in card.data.tags
    # scores were measured with GNMT-penalty decoding, which built-in generate lacks: body only, no model-index
    assert card.data.eval_results is None and "| sacreBLEU | 12.35 |" in card.text
    assert f"| Parameters | {hub.count_parameters(tiny['model']):,} |" in card.text
    assert "MarianMTModel.from_pretrained(\"org/vaswani-base-marian\")" in card.text


def test_endpoint_handler_translates_like_generate(tiny):
    spec = importlib.util.spec_from_file_location("_vaswani_handler", tiny["folder"] / "handler.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    handler = module.EndpointHandler(str(tiny["folder"]))
    out = handler({"inputs": SOURCES})
    assert out == [{"translation_text": text.strip()} for text in tiny["text"]]
    single = handler({"inputs": SOURCES[0], "parameters": {"num_beams": 1, "max_new_tokens": 3}})
    assert len(single) == 1 and isinstance(single[0]["translation_text"], str)
    assert (tiny["folder"] / "requirements.txt").read_text().startswith("transformers>=5")
    assert vaswani_hf.__version__
