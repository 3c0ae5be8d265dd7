"""The model in clients we did not write (docs/ecosystem.md): a folder re-saved by any of them keeps its pipeline.

A fine-tuning user loads our Hub folder into transformers' `Seq2SeqTrainer` + `DataCollatorForSeq2Seq`, PEFT or
plain `save_pretrained` (with the package, or with `trust_remote_code` without it) and saves the result. Each such
folder must still answer `pipeline(task, model=folder, trust_remote_code=True)` for every task name the config
lists, in a fresh process that cannot import vaswani_hf, with the translations of the in-memory model."""

import copy
import json

import pytest
import torch
from conftest import run_python
from translation_model import SUBPROCESS_ENV

from vaswani_hf.hub import save_hub_folder
from vaswani_hf.translation.inference import translate

SOURCES = ["dog", "", "the big red ball near water with a child", "a man runs in the park"]
PAIRS = ["a man runs", "the dog sits in the snow", "a child plays with a ball", "red blue green"] * 4

# one torch thread for the module's tiny models (translation_model.one_thread)
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]


def _logits(model, tokenizer):
    batch = tokenizer(SOURCES[2:], return_tensors="pt", padding=True)
    decoder_input_ids = torch.tensor([[0, 5, 6, 7], [0, 8, 9, 10]])
    with torch.no_grad():
        return model(**batch, decoder_input_ids=decoder_input_ids).logits


@pytest.fixture(scope="module")
def hub_folder(model, tokenizer, tmp_path_factory):
    """The folder a training run publishes (languages known: "translation_en_to_de" too)."""
    out = tmp_path_factory.mktemp("hub") / "hub"
    save_hub_folder(copy.deepcopy(model), tokenizer, out, training_info={"source_lang": "en", "target_lang": "de"})
    return out


@pytest.fixture(scope="module")
def resaved(hub_folder, tokenizer, tmp_path_factory):
    """The Hub folder loaded with the Auto classes and saved again by `save_pretrained` (with the package)."""
    from transformers import AutoModelForSeq2SeqLM

    loaded = AutoModelForSeq2SeqLM.from_pretrained(hub_folder).eval()
    out = tmp_path_factory.mktemp("resaved") / "resaved"
    loaded.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return {"folder": out, "model": loaded}


@pytest.fixture(scope="module")
def trainer_saved(hub_folder, tokenizer, tmp_path_factory):
    """Two updates of `Seq2SeqTrainer` with `DataCollatorForSeq2Seq` (as run_translation.py trains), then
    `Trainer.save_model`."""
    from datasets import Dataset
    from transformers import AutoModelForSeq2SeqLM, DataCollatorForSeq2Seq, Seq2SeqTrainer, Seq2SeqTrainingArguments

    model = AutoModelForSeq2SeqLM.from_pretrained(hub_folder)
    data = Dataset.from_dict({"source": PAIRS, "target": PAIRS}).map(
        lambda row: tokenizer(row["source"], text_target=row["target"]), remove_columns=["source", "target"]
    )
    work = tmp_path_factory.mktemp("trainer")
    args = Seq2SeqTrainingArguments(
        output_dir=str(work / "run"),
        max_steps=2,
        per_device_train_batch_size=8,
        learning_rate=1e-3,
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    trainer = Seq2SeqTrainer(
        model=model,
        args=args,
        train_dataset=data,
        processing_class=tokenizer,
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model),
    )
    before = copy.deepcopy(model.state_dict())
    trainer.train()
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())  # it did train
    out = work / "trainer_saved"
    trainer.save_model(str(out))
    return {"folder": out, "model": model.eval()}


@pytest.fixture(scope="module")
def peft_merged(hub_folder, tokenizer, tmp_path_factory):
    """PEFT LoRA on the attention projections: the adapter saved and loaded back, merged into the weights
    (`merge_and_unload`) and the merged model saved and loaded back."""
    peft = pytest.importorskip("peft")
    from transformers import AutoModelForSeq2SeqLM

    work = tmp_path_factory.mktemp("peft")
    base = AutoModelForSeq2SeqLM.from_pretrained(hub_folder).eval()
    lora = peft.LoraConfig(
        task_type="SEQ_2_SEQ_LM", r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False
    )  # random A and B: the adapter changes the outputs
    torch.manual_seed(0)
    adapted = peft.get_peft_model(base, lora).eval()
    with_adapter = _logits(adapted, tokenizer)
    assert (with_adapter - _logits(AutoModelForSeq2SeqLM.from_pretrained(hub_folder), tokenizer)).abs().max() > 1e-3
    adapted.save_pretrained(work / "adapter")
    reloaded = peft.PeftModel.from_pretrained(AutoModelForSeq2SeqLM.from_pretrained(hub_folder), work / "adapter")
    assert torch.equal(_logits(reloaded.eval(), tokenizer), with_adapter)
    merged = adapted.merge_and_unload()
    assert (_logits(merged, tokenizer) - with_adapter).abs().max() < 1e-5
    out = work / "peft_merged"
    merged.save_pretrained(out)
    tokenizer.save_pretrained(out)
    assert torch.equal(
        _logits(AutoModelForSeq2SeqLM.from_pretrained(out).eval(), tokenizer), _logits(merged, tokenizer)
    )
    return {"folder": out, "model": merged}


def test_every_saved_folder_carries_the_pipeline_its_config_names(hub_folder, resaved, trainer_saved, peft_merged):
    for folder in (hub_folder, resaved["folder"], trainer_saved["folder"], peft_merged["folder"]):
        config = json.loads((folder / "config.json").read_text())
        assert set(config["custom_pipelines"]) == {"translation"}  # one task: `pipeline(model=folder)` infers it
        assert config["langs"] == ["en", "de"]  # the pair: "translation_en_to_de" and src_lang/tgt_lang checks
        assert {info["impl"] for info in config["custom_pipelines"].values()} == {
            "pipeline_vaswani.VaswaniTranslationPipeline"
        }
        assert (folder / "pipeline_vaswani.py").read_bytes() == (hub_folder / "pipeline_vaswani.py").read_bytes()


def test_pipeline_task_names_with_the_package(resaved, tokenizer, tmp_path):
    """The same where vaswani_hf is installed and imported (the remote-code cache in tmp_path, hence a process)."""
    code = f"""
import json
import vaswani_hf
from transformers import pipeline

out = {{}}
for task, key in (("translation", "translation_text"), ("text2text-generation", "generated_text"),
                  ("translation_en_to_de", "translation_text")):
    pipe = pipeline(task, model={str(resaved["folder"])!r}, trust_remote_code=True, device="cpu")
    out[task] = [r[key] for r in pipe({SOURCES!r}, num_beams=1)]
print("RESULT" + json.dumps(out))
"""
    env = {**SUBPROCESS_ENV, "HF_MODULES_CACHE": str(tmp_path / "modules")}
    result = json.loads(run_python(code, cwd=tmp_path, env=env).split("RESULT", 1)[1])
    expected = translate(resaved["model"], tokenizer, SOURCES, num_beams=1, progress=False)
    assert result == {task: expected for task in ("translation", "text2text-generation", "translation_en_to_de")}


def test_resaved_folders_translate_in_a_process_without_the_package(
    model, tokenizer, hub_folder, resaved, trainer_saved, peft_merged, tmp_path
):
    """Every folder, and one re-saved there by `save_pretrained` of the remote-code model, under every task name,
    gives the in-memory model's translations (the paper's beam search)."""
    folders = {
        "hub": (hub_folder, model),
        "resaved": (resaved["folder"], resaved["model"]),
        "trainer": (trainer_saved["folder"], trainer_saved["model"]),
        "peft": (peft_merged["folder"], peft_merged["model"]),
    }
    code = f"""
import json, sys
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline

sources, folders = {SOURCES!r}, { ({k: str(v[0]) for k, v in folders.items()})!r}
remote = AutoModelForSeq2SeqLM.from_pretrained(folders["hub"], trust_remote_code=True)
remote.save_pretrained({str(tmp_path / "remote_resaved")!r})
AutoTokenizer.from_pretrained(folders["hub"]).save_pretrained({str(tmp_path / "remote_resaved")!r})
folders["remote_resaved"] = {str(tmp_path / "remote_resaved")!r}
out = {{"leaked": sorted(m for m in sys.modules if m.startswith("vaswani_hf"))}}
for name, folder in folders.items():
    for task, key in (("translation", "translation_text"), ("text2text-generation", "generated_text"),
                      ("translation_en_to_de", "translation_text")):
        pipe = pipeline(task, model=folder, trust_remote_code=True, device="cpu")
        out[name + " " + task] = [type(pipe).__module__, [r[key] for r in pipe(sources, batch_size=2)]]
print("RESULT" + json.dumps(out))
"""
    env = {**SUBPROCESS_ENV, "HF_MODULES_CACHE": str(tmp_path / "modules")}
    result = json.loads(run_python(code, cwd=tmp_path, env=env, block_package=True).split("RESULT", 1)[1])
    assert result.pop("leaked") == []
    folders["remote_resaved"] = (None, model)
    for name, (_, source_model) in folders.items():
        expected = translate(source_model, tokenizer, SOURCES, progress=False)
        for task in ("translation", "text2text-generation", "translation_en_to_de"):
            module, texts = result[f"{name} {task}"]
            assert module.startswith("transformers_modules.") and texts == expected, (name, task)
