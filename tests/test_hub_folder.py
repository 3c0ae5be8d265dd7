"""The Hub-ready model folder (vaswani_hf.hub.folder): it loads by repo id with and without the package, translates
with the paper's decoding through the pipeline and the endpoint handler, carries every code file its config.json and
code need under `trust_remote_code` (averaged checkpoints too), and appears whole without replacing anything unless
asked."""

import importlib.util
import json
import logging

import pytest
from conftest import run_python
from hub_helpers import (
    REPO_ID,
    SOURCES,
    assert_same_outputs,
    clean_env,
    copy_folder,
    load_in_subprocess,
    make_tiny_model,
    place_in_hf_cache,
)

from vaswani_hf import hub
from vaswani_hf.io import UsageError

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ----------------------------------------------------------------------------------------------------------------------
# a Hub cache, offline, with and without the package
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


# ----------------------------------------------------------------------------------------------------------------------
# save_hub_folder
# ----------------------------------------------------------------------------------------------------------------------

INFO = {"source_lang": "en", "target_lang": "de", "model_name": "vaswani-tiny"}


@pytest.fixture(scope="module")
def hub_folder(tmp_path_factory):
    model, tokenizer = make_tiny_model(seed=1)
    model.generation_config.max_length = 20  # what Seq2SeqTrainer leaves behind; the folder ships the paper's
    model.generation_config.num_beams = 1

    def plots(folder):
        (folder / "loss.png").write_bytes(b"\x89PNG fake")

    out = tmp_path_factory.mktemp("hub") / "folder"
    returned = hub.save_hub_folder(
        model,
        tokenizer,
        out,
        scores={"bleu": 12.5},
        training_info={**INFO, "eval_dataset": {"name": "tiny test"}},
        extra_files={"training_metrics.json": '{"step": 3}', "blob.bin": b"\x00\x01"},
        write_extra=plots,
    )
    return {"folder": out, "returned": returned, "model": model, "tokenizer": tokenizer}


def test_hub_folder_contents(hub_folder):
    folder = hub_folder["folder"]
    assert hub_folder["returned"] == folder
    names = {p.name for p in folder.iterdir()}
    assert {
        "model.safetensors",
        "config.json",
        "generation_config.json",
        "configuration_vaswani.py",
        "modeling_vaswani.py",
        "pipeline_vaswani.py",
        "generation_config_vaswani.py",
        "validation_vaswani.py",
        "tokenizer.json",
        "handler.py",
        "requirements.txt",
        "README.md",
        "metrics.json",
        "training_metrics.json",
        "blob.bin",
        "loss.png",
    } <= names
    assert (folder / "blob.bin").read_bytes() == b"\x00\x01"
    assert json.loads((folder / "training_metrics.json").read_text()) == {"step": 3}
    generation = json.loads((folder / "generation_config.json").read_text())
    assert (generation["num_beams"], generation["length_penalty"]) == (4, 0.6)
    assert generation["length_penalty_type"] == "gnmt" and generation["early_stopping"] == "never"
    assert (generation["max_length_a"], generation["max_length_b"]) == (1.0, 50)
    config = json.loads((folder / "config.json").read_text())
    assert set(config["custom_pipelines"]) == {"translation"} and config["langs"] == ["en", "de"]
    assert hub.missing_code_files(folder) == []
    assert hub.check_folder(folder, repo_id=REPO_ID) == []
    assert "| BLEU (sacreBLEU) | 12.50 |" in (folder / "README.md").read_text()
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".")]  # no temporary folder left


def test_hub_folder_refuses_existing_output_and_replaces_it_only_with_overwrite(hub_folder, tmp_path):
    model, tokenizer = hub_folder["model"], hub_folder["tokenizer"]
    existing = tmp_path / "existing"
    existing.mkdir()
    (existing / "notes.txt").write_text("mine", encoding="utf-8")
    with pytest.raises(UsageError, match="exists and is not empty; pass --overwrite"):
        hub.save_hub_folder(model, tokenizer, existing, training_info=INFO)
    assert [p.name for p in existing.iterdir()] == ["notes.txt"]
    (tmp_path / "a_file").write_text("x", encoding="utf-8")
    with pytest.raises(UsageError, match="is a file"):
        hub.save_hub_folder(model, tokenizer, tmp_path / "a_file", training_info=INFO)
    with pytest.raises(UsageError, match="is not an earlier Hub model folder"):  # not ours, whatever overwrite says
        hub.save_hub_folder(model, tokenizer, existing, training_info=INFO, overwrite=True)
    assert [p.name for p in existing.iterdir()] == ["notes.txt"]
    ours = hub.save_hub_folder(model, tokenizer, tmp_path / "ours", training_info=INFO)
    (ours / "notes.txt").write_text("stale", encoding="utf-8")
    hub.save_hub_folder(model, tokenizer, ours, training_info=INFO, overwrite=True)
    assert not (ours / "notes.txt").exists() and (ours / "model.safetensors").is_file()


def test_hub_folder_with_an_unrenderable_card_gets_a_minimal_one(hub_folder, tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        out = hub.save_hub_folder(
            hub_folder["model"],
            hub_folder["tokenizer"],
            tmp_path / "minimal",
            scores={"bleu": 20.0},
            training_info={"source_lang": "en", "target_lang": "de"},
            extra_files={"training_metrics.json": "{}"},
        )
    text = (out / "README.md").read_text()
    assert "could not be rendered" in caplog.text and "eval_dataset" in caplog.text
    assert text.startswith("---\nlibrary_name: transformers") and "- bleu: 20" in text
    assert "`training_metrics.json`" in text


def test_hub_folder_from_a_trainer_saves_the_unwrapped_model(hub_folder, tmp_path):
    class FakeTrainer:  # the attributes save_hub_folder looks for
        args = None
        model = hub_folder["model"]

        class accelerator:  # noqa: N801
            @staticmethod
            def unwrap_model(model):
                return model

    out = hub.save_hub_folder(FakeTrainer(), hub_folder["tokenizer"], tmp_path / "from_trainer", training_info=INFO)
    assert (out / "model.safetensors").is_file() and hub.missing_code_files(out) == []


@pytest.mark.slow
def test_hub_and_averaged_folders_load_with_remote_code_without_the_package(hub_folder, tmp_path):
    """Both folders carry every code file config.json and the code need: generation runs where vaswani_hf is not
    installed, with the same result as in this process."""
    import copy

    import torch
    from transformers import AutoModelForSeq2SeqLM

    from vaswani_hf.training.checkpoints import save_averaged_checkpoint
    from vaswani_hf.translation.inference import translate

    model, tokenizer = hub_folder["model"], hub_folder["tokenizer"]
    for step in (1, 2):  # two "checkpoints" as the Trainer writes them (save_pretrained of the registered classes)
        checkpoint = copy.deepcopy(model)
        with torch.no_grad():  # two distinct checkpoints (averaging refuses one checkpoint given twice)
            checkpoint.model.encoder.layers[0].final_layer_norm.bias.add_(1e-3 * step)
        checkpoint.save_pretrained(tmp_path / "run" / f"checkpoint-{step}")
        tokenizer.save_pretrained(tmp_path / "run" / f"checkpoint-{step}")
    averaged = save_averaged_checkpoint(
        [tmp_path / "run" / "checkpoint-1", tmp_path / "run" / "checkpoint-2"], tmp_path / "averaged"
    )
    assert hub.missing_code_files(averaged) == []
    expected = translate(model, tokenizer, SOURCES, num_beams=1, max_new_tokens=8, progress=False)
    expected_averaged = translate(
        AutoModelForSeq2SeqLM.from_pretrained(averaged).eval(),
        tokenizer,
        SOURCES,
        num_beams=1,
        max_new_tokens=8,
        progress=False,
    )
    code = f"""
import json
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline
out = {{}}
for name in ({str(hub_folder["folder"])!r}, {str(averaged)!r}):
    tok = AutoTokenizer.from_pretrained(name, trust_remote_code=True)
    model = AutoModelForSeq2SeqLM.from_pretrained(name, trust_remote_code=True).eval()
    batch = tok({SOURCES!r}, return_tensors="pt", padding=True)
    ids = model.generate(**batch, num_beams=1, max_new_tokens=8)
    out[name] = [model.__module__, [t.strip() for t in tok.batch_decode(ids, skip_special_tokens=True)]]
pipe = pipeline("translation", model={str(hub_folder["folder"])!r}, trust_remote_code=True)
out["pipeline"] = [r["translation_text"] for r in pipe({SOURCES!r}, num_beams=1, max_new_tokens=8)]
print(json.dumps(out))
"""
    # one thread, as in this process: the same code on the same CPU then adds in the same order
    stdout = run_python(code, cwd=tmp_path, block_package=True, env={"OMP_NUM_THREADS": "1"})
    result = json.loads(stdout.strip().splitlines()[-1])
    for name, want in ((str(hub_folder["folder"]), expected), (str(averaged), expected_averaged)):
        module, texts = result[name]
        assert module.startswith("transformers_modules.") and texts == want, (name, result[name])
    assert [t.strip() for t in result["pipeline"]] == expected


def test_missing_code_files_names_what_config_json_references(hub_folder, tmp_path):
    """Every folder transformers writes is whole: the config names the pipeline and saving any model copies its file
    (a re-save of a model whose config came from a Hub folder, as a fine-tuning run's checkpoints are). A folder
    assembled by hand may still lack a file: the check names it."""
    model = hub_folder["model"]
    assert model.config.langs == ["en", "de"]  # the Hub folder's language pair stays
    model.save_pretrained(tmp_path / "checkpoint-1")
    assert (tmp_path / "checkpoint-1" / "pipeline_vaswani.py").is_file()
    assert hub.missing_code_files(tmp_path / "checkpoint-1") == []

    folder = copy_folder(hub_folder["folder"], tmp_path / "copy")
    (folder / "pipeline_vaswani.py").unlink()
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"]["AutoModel"] = "modeling_extra.VaswaniModel"
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    problems = hub.missing_code_files(folder)
    assert "code file pipeline_vaswani.py referenced by config.json is missing" in problems
    assert "code file modeling_extra.py referenced by config.json is missing" in problems


@pytest.mark.slow
def test_without_the_package_the_folder_loads_silently_where_transformers_allows(hub_folder, tmp_path):
    """Where vaswani_hf is not installed, `trust_remote_code=True` loads tokenizer and model without a word, and so
    does the tokenizer's own class, which needs no code. `AutoTokenizer.from_pretrained(folder)` without
    `trust_remote_code` cannot be silent in transformers 5.24, for any remote-code model: it reads config.json before
    tokenizer_config.json, asks whether to run the code (models/auto/configuration_auto.py, resolve_trust_remote_code;
    15 s on a terminal), and, refused, falls back to the base config class, whose check warns "You are using a model
    of type `vaswani` to instantiate a model of type ``" (configuration_utils.py). A Marian folder is silent because
    its model type is transformers' own. This test fails when transformers changes that, so the README can say so."""

    folder = str(hub_folder["folder"])
    silent = f"""
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, PreTrainedTokenizerFast
AutoTokenizer.from_pretrained({folder!r}, trust_remote_code=True)
AutoModelForSeq2SeqLM.from_pretrained({folder!r}, trust_remote_code=True)
PreTrainedTokenizerFast.from_pretrained({folder!r})
"""
    out, err = _without_the_package(silent, tmp_path)
    # transformers' progress bar of loading weights is printed for every model, Marian too
    assert out == "" and all(line.startswith("Loading weights") for line in err.strip().splitlines()), (out, err)
    out, err = _without_the_package(
        f"import transformers; transformers.AutoTokenizer.from_pretrained({folder!r})", tmp_path
    )
    assert "Do you wish to run the custom code?" in out, "AutoTokenizer no longer asks: say so in the README"
    assert err.strip().startswith(
        "[transformers] You are using a model of type `vaswani` to instantiate a model of type ``"
    )
    assert len(err.strip().splitlines()) == 1, "AutoTokenizer says something else now: update the README"


def _without_the_package(code: str, folder) -> tuple[str, str]:
    """(stdout, stderr) of `code` in a fresh interpreter that cannot import vaswani_hf, offline, standard input empty."""
    import os
    import subprocess
    import sys

    from conftest import BLOCK_PACKAGE

    env = {**os.environ, "HF_MODULES_CACHE": str(folder / "modules"), "HF_HUB_OFFLINE": "1", "PYTHONPATH": ""}
    result = subprocess.run(
        [sys.executable, "-c", BLOCK_PACKAGE + code],
        cwd=folder,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout, result.stderr
