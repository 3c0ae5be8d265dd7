"""`transformers.pipeline` as a new user calls it (docs/ecosystem.md): with the objects in memory after fine-tuning,
without a task for a folder or a Hub id (offline), under transformers 4's task names ("translation",
"translation_xx_to_yy" for any pair, "text2text-generation") and with its `src_lang` / `tgt_lang`.
Each call gives the translations of `translate()`, or fails with a message that says what to do. And what the same
users ask of `generate()` next: attention weights (`output_attentions`), which need eager attention."""

import copy
import json
import logging

import pytest
from conftest import run_python
from hub_helpers import clean_env, place_in_hf_cache
from transformers import pipeline
from translation_model import SUBPROCESS_ENV

from vaswani_hf import VaswaniConfig
from vaswani_hf.hub import save_hub_folder
from vaswani_hf.pipeline_vaswani import TASKS, VaswaniTranslationPipeline, register_pipeline_tasks
from vaswani_hf.translation.inference import translate

# one torch thread for the module's tiny models (translation_model.one_thread)
pytestmark = pytest.mark.usefixtures("one_thread")

SOURCES = ["dog", "", "the big red ball near water with a child", "a man runs in the park"]
REPO_ID = "org/vaswani-pipeline"
PAIR = {"source_lang": "en", "target_lang": "de"}


def _texts(records, key="translation_text"):
    return [record[key] for record in records]


@pytest.fixture(scope="module")
def hub_folder(model, tokenizer, tmp_path_factory):
    """The folder a training run publishes: its config knows the language pair (`langs`)."""
    out = tmp_path_factory.mktemp("hub") / "hub"
    save_hub_folder(copy.deepcopy(model), tokenizer, out, training_info=PAIR)
    return out


@pytest.fixture(scope="module")
def en_de(hub_folder):
    """That folder loaded for fine-tuning: the model in memory knows its pair."""
    from transformers import AutoModelForSeq2SeqLM

    return AutoModelForSeq2SeqLM.from_pretrained(hub_folder).eval()


# ---------------------------------------------------------------------------------------------------------------------
# objects in memory (cause 1) and transformers 4's src_lang / tgt_lang (cause 5), with the package
# ---------------------------------------------------------------------------------------------------------------------


def test_pipeline_from_objects_in_memory(model, tokenizer):
    """The usual step after fine-tuning in a notebook: no folder, so no config.json for transformers to read."""
    expected = translate(model, tokenizer, SOURCES, num_beams=1, progress=False)
    pipe = pipeline("translation", model=model, tokenizer=tokenizer, num_beams=1)
    assert isinstance(pipe, VaswaniTranslationPipeline)
    assert _texts(pipe(SOURCES, batch_size=2)) == expected
    generated = pipeline("text2text-generation", model=model, tokenizer=tokenizer)
    assert _texts(generated(SOURCES, num_beams=1), "generated_text") == expected


def test_pipeline_from_objects_in_memory_names_the_pair_task(en_de, tokenizer):
    expected = translate(en_de, tokenizer, SOURCES[:1], num_beams=1, progress=False)
    pipe = pipeline("translation_en_to_de", model=en_de, tokenizer=tokenizer, num_beams=1)
    assert _texts(pipe(SOURCES[:1])) == expected
    with pytest.raises(ValueError, match=r"translates en -> de .* 'translation_de_to_en' asks for de -> en; use"):
        VaswaniTranslationPipeline(model=en_de, tokenizer=tokenizer, task="translation_de_to_en")


def test_any_pair_task_reaches_the_pipeline_which_checks_the_pair(en_de, model, tokenizer, hub_folder):
    """Every "translation_xx_to_yy" name builds this pipeline through `transformers.pipeline`, whatever models were
    loaded before, with the task name kept as given: a model whose config knows another pair is refused naming both
    pairs (in memory and from a folder), one that knows no pair translates (its one pair, whatever the name)."""
    message = r"translates en -> de \(config `langs`\), but the task 'translation_de_to_en' asks for de -> en; use"
    with pytest.raises(ValueError, match=message):
        pipeline("translation_de_to_en", model=en_de, tokenizer=tokenizer)
    with pytest.raises(ValueError, match=message):
        pipeline("translation_de_to_en", model=str(hub_folder), device="cpu")
    expected = translate(model, tokenizer, SOURCES, num_beams=1, progress=False)
    for task in ("translation_fr_to_ja", "translation_en_to_de"):
        pipe = pipeline(task, model=model, tokenizer=tokenizer, num_beams=1)
        assert isinstance(pipe, VaswaniTranslationPipeline) and pipe.task == task
        assert _texts(pipe(SOURCES)) == expected


def test_generate_dict_outputs_are_refused_with_what_to_call_instead(model, tokenizer):
    """The pipeline returns texts: a call asking for generate()'s scores gets one ValueError saying to call
    `model.generate` (it was an AttributeError deep in `_forward`); a model whose generation config asks for dicts
    by default still translates."""
    pipe = pipeline("translation", model=model, tokenizer=tokenizer, num_beams=1)
    advice = r"the pipeline returns texts; call model.generate\(.*return_dict_in_generate=True"
    with pytest.raises(ValueError, match=advice):
        pipe("A woman.", return_dict_in_generate=True, output_scores=True)
    with pytest.raises(ValueError, match=advice):
        pipeline("translation", model=model, tokenizer=tokenizer, return_dict_in_generate=True)
    expected = translate(model, tokenizer, SOURCES, num_beams=1, progress=False)
    dict_model = copy.deepcopy(model)
    dict_model.generation_config.return_dict_in_generate = True
    dict_model.generation_config.output_scores = True
    assert _texts(pipeline("translation", model=dict_model, tokenizer=tokenizer, num_beams=1)(SOURCES)) == expected


def test_pipeline_without_a_tokenizer_says_to_pass_one(model):
    with pytest.raises(ValueError, match="pass `tokenizer=`"):
        VaswaniTranslationPipeline(model=model, tokenizer=None, task="translation")


def test_src_lang_and_tgt_lang_are_checked_against_the_models_pair(en_de, tokenizer):
    expected = translate(en_de, tokenizer, SOURCES, num_beams=1, progress=False)
    pipe = pipeline("translation", model=en_de, tokenizer=tokenizer, num_beams=1, src_lang="en", tgt_lang="de")
    assert _texts(pipe(SOURCES)) == expected
    assert _texts(pipe(SOURCES, src_lang="en", tgt_lang="de")) == expected
    assert _texts(pipe(SOURCES, tgt_lang="de")) == expected
    with pytest.raises(
        ValueError,
        match=r"translates en -> de \(config `langs`\), but src_lang/tgt_lang asks for "
        r"fr -> de; drop src_lang/tgt_lang",
    ):
        pipe(SOURCES, src_lang="fr")
    with pytest.raises(ValueError, match="asks for en -> fr"):
        pipeline("translation", model=en_de, tokenizer=tokenizer, tgt_lang="fr")


def test_src_lang_and_tgt_lang_are_ignored_where_the_model_knows_no_pair(model, tokenizer):
    assert model.config.langs is None
    pipe = pipeline("translation", model=model, tokenizer=tokenizer, num_beams=1)
    expected = translate(model, tokenizer, SOURCES, num_beams=1, progress=False)
    assert _texts(pipe(SOURCES, src_lang="fr", tgt_lang="ja")) == expected


# ---------------------------------------------------------------------------------------------------------------------
# the registration and config.json's one task (cause 2)
# ---------------------------------------------------------------------------------------------------------------------


def test_registration_is_idempotent_and_saves_one_task():
    from transformers import pipelines

    removed = getattr(pipelines, "REMOVED_TASKS", None)  # transformers >= 5.2x (5.17 has no such dict)
    register_pipeline_tasks(["en", "de"])
    aliases = pipelines.PIPELINE_REGISTRY.task_aliases
    register_pipeline_tasks(["en", "de"])
    assert pipelines.PIPELINE_REGISTRY.task_aliases is aliases
    for task in TASKS:
        assert removed is None or task not in removed  # the monkeypatch: transformers 5 refuses these names
        assert pipelines.PIPELINE_REGISTRY.supported_tasks[task]["impl"].__name__ == "VaswaniTranslationPipeline"
    # the other monkeypatch: every pair name is an alias of "translation"; transformers' own aliases are kept
    for task in ("translation_en_to_de", "translation_zh_to_pt-BR"):
        assert task in aliases and aliases[task] == "translation" and aliases.get(task) == "translation"
    assert aliases["ner"] == "token-classification" and "translation" not in aliases and aliases.get("x") is None
    assert pipelines.PIPELINE_REGISTRY.check_task("translation_de_to_en")[0] == "translation"
    assert removed is None or "summarization" in removed  # nothing else is touched
    assert set(VaswaniTranslationPipeline._registered_impl) == {"translation"}  # what Pipeline.save_pretrained writes


def test_config_names_one_task_and_reads_older_config_files():
    """transformers infers a task from a config only where `custom_pipelines` has exactly one. A config.json of an
    earlier version (three names, the pair as a name) loads as the one task plus `langs`; other pipelines stay."""
    assert set(VaswaniConfig().custom_pipelines) == {"translation"}
    entry = {"impl": "pipeline_vaswani.VaswaniTranslationPipeline", "pt": ["AutoModelForSeq2SeqLM"], "type": "text"}
    other = {"impl": "my_pipeline.Mine", "pt": ["AutoModel"], "type": "text"}
    old = VaswaniConfig(
        custom_pipelines={
            "translation": entry,
            "text2text-generation": entry,
            "translation_en_to_de": entry,
            "mine": other,
        }
    )
    assert old.custom_pipelines == {"translation": entry, "mine": other}
    assert old.langs == ["en", "de"]


def test_hub_folder_config_names_one_task_and_the_pair(hub_folder):
    config = json.loads((hub_folder / "config.json").read_text())
    assert list(config["custom_pipelines"]) == ["translation"]
    assert config["langs"] == ["en", "de"]


# ---------------------------------------------------------------------------------------------------------------------
# fresh processes: a folder and a Hub id (offline cache) without a task, with and without the package
# ---------------------------------------------------------------------------------------------------------------------

CALLS = """
import json, sys
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline

sources, folder, repo_id = {sources!r}, {folder!r}, {repo_id!r}
out = {{}}
for name, where in (("folder", folder), ("hub", repo_id)):
    pipe = pipeline(model=where, trust_remote_code=True, device="cpu")  # no task: config.json names one
    out[name] = [pipe.task, type(pipe).__module__, [r["translation_text"] for r in pipe(sources, batch_size=2)]]
pipe = pipeline("translation_en_to_de", model=repo_id, trust_remote_code=True, device="cpu")
out["pair"] = [r["translation_text"] for r in pipe(sources, src_lang="en", tgt_lang="de")]
try:
    pipe(sources, src_lang="fr")
except ValueError as error:
    out["wrong pair"] = str(error)
memory = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True)  # the objects after fine-tuning
# The pipelines asked for above registered the task names, so objects in memory find them without the package too.
pipe = pipeline("translation", model=memory, tokenizer=AutoTokenizer.from_pretrained(folder))
out["memory"] = [type(pipe).__module__, [r["translation_text"] for r in pipe(sources)]]
try:
    pipeline("translation_de_to_en", model=folder, trust_remote_code=True, device="cpu")
except ValueError as error:
    out["wrong pair task"] = str(error)
out["leaked"] = sorted(m for m in sys.modules if m.startswith("vaswani_hf"))
print("RESULT" + json.dumps(out))
"""


@pytest.mark.slow
@pytest.mark.parametrize("package", [False, True], ids=["without-package", "with-package"])
def test_pipeline_without_a_task_for_a_folder_and_an_offline_hub_id(model, tokenizer, hub_folder, package, tmp_path):
    home = tmp_path / "hf_home"
    place_in_hf_cache(hub_folder, home / "hub", REPO_ID)
    code = ("import vaswani_hf\n" if package else "") + CALLS.format(
        sources=SOURCES, folder=str(hub_folder), repo_id=REPO_ID
    )
    # a closed port as endpoint: any request that slipped past HF_HUB_OFFLINE would fail loudly
    env = clean_env(
        **{
            **SUBPROCESS_ENV,
            "HF_HOME": str(home),
            "HF_HUB_OFFLINE": "1",
            "HF_ENDPOINT": "http://127.0.0.1:9",
            "HF_MODULES_CACHE": str(tmp_path / "modules"),
        }
    )
    out = json.loads(run_python(code, cwd=tmp_path, env=env, block_package=not package).split("RESULT", 1)[1])
    expected = translate(model, tokenizer, SOURCES, progress=False)
    leaked = out.pop("leaked")
    assert ("vaswani_hf" in leaked) if package else leaked == []
    for name in ("folder", "hub"):
        task, module, texts = out[name]
        assert (task, texts) == ("translation", expected), name
        assert module.startswith("transformers_modules."), name
    assert out["pair"] == expected
    assert "translates en -> de (config `langs`), but src_lang/tgt_lang asks for fr -> de" in out["wrong pair"]
    assert (
        "translates en -> de (config `langs`), but the task 'translation_de_to_en' asks for de -> en"
        in out["wrong pair task"]
    )
    module, texts = out["memory"]
    assert texts == expected
    if package:  # the package's classes win over the folder's copies
        assert module == "vaswani_hf.pipeline_vaswani"
    else:
        assert module.startswith("transformers_modules.") and module.endswith(".pipeline_vaswani")


# ---------------------------------------------------------------------------------------------------------------------
# generate(output_attentions=True): empty with SDPA (transformers says so once), weights with eager attention
# ---------------------------------------------------------------------------------------------------------------------


def test_output_attentions_are_empty_with_sdpa_and_given_by_eager_attention(model, tokenizer):
    from transformers.utils import logging as hf_logging

    batch = tokenizer(SOURCES[2:], return_tensors="pt", padding=True)
    settings = dict(num_beams=2, max_new_tokens=3, return_dict_in_generate=True, output_attentions=True)
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    sdpa_logger = hf_logging.get_logger("transformers.integrations.sdpa_attention")
    sdpa_logger.addHandler(handler)
    logging.Logger.warning_once.cache_clear()  # transformers warns once per process
    try:
        assert model.config._attn_implementation == "sdpa"
        out = model.generate(**batch, **settings)
    finally:
        sdpa_logger.removeHandler(handler)
    assert out.encoder_attentions == () and all(step == () for step in out.cross_attentions)
    assert any("set your attention to `eager`" in record.getMessage() for record in records)

    eager = copy.deepcopy(model)
    eager.set_attn_implementation("eager")
    out = eager.generate(**batch, **settings)
    assert len(out.encoder_attentions) == eager.config.num_encoder_layers
    weights = out.encoder_attentions[0]  # (B * beams, H, S, S)
    assert weights.shape[1] == eager.config.num_heads
    assert weights.sum(-1).sub(1).abs().max() < 1e-5  # rows are distributions
    assert len(out.cross_attentions[0]) == eager.config.num_decoder_layers


MARIAN_REFUSALS = """
import json
from transformers import AutoTokenizer, MarianConfig, MarianMTModel, pipeline

tokenizer = AutoTokenizer.from_pretrained({folder!r})
marian = MarianMTModel(MarianConfig(vocab_size=len(tokenizer), d_model=16, encoder_layers=1, decoder_layers=1,
                                    encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
                                    decoder_ffn_dim=32, max_position_embeddings=64,
                                    pad_token_id=tokenizer.pad_token_id,
                                    decoder_start_token_id=tokenizer.pad_token_id))
out = {{}}
for task in {tasks!r}:
    try:
        pipeline(task, model=marian, tokenizer=tokenizer)
    except KeyError as error:
        out[task] = str(error)
"""


def test_other_models_keep_transformers_refusal_of_the_removed_tasks(tokenizer, tmp_path):
    """The names come back for this model only: a MarianMTModel gets, under every one of them, the KeyError that
    transformers gives without the package (a fresh interpreter that cannot import it), whatever pair the name
    holds, while our pipeline is registered (our class refuses any other model type)."""
    tasks = ["translation", "text2text-generation", "translation_fr_to_en", "translation_en_to_de"]
    tokenizer.save_pretrained(tmp_path / "tokenizer")
    code = MARIAN_REFUSALS.format(folder=str(tmp_path / "tokenizer"), tasks=tasks)
    printed = run_python(
        code + 'print("RESULT" + json.dumps(out))\n', cwd=tmp_path, env=SUBPROCESS_ENV, block_package=True
    )
    without = json.loads(printed.split("RESULT", 1)[1])
    assert list(without) == tasks and all(task in without[task] for task in tasks)  # each named as given
    register_pipeline_tasks(["en", "de"])
    namespace = {}
    exec(code, namespace)  # the same calls in this process, with the package imported and our pipeline registered
    assert namespace["out"] == without


# ---------------------------------------------------------------------------------------------------------------------
# the Hub files change nothing in transformers on loading; a pipeline asked for registers the task names
# ---------------------------------------------------------------------------------------------------------------------

SNAPSHOTS = """
import json
from transformers import AutoConfig, AutoModelForSeq2SeqLM, AutoTokenizer, pipeline, pipelines

def snapshot():
    registry = pipelines.PIPELINE_REGISTRY
    return repr((
        sorted((task, repr(entry.get("impl"))) for task, entry in pipelines.SUPPORTED_TASKS.items()),
        sorted((task, repr(entry.get("impl"))) for task, entry in registry.supported_tasks.items()),
        type(registry.task_aliases).__name__, sorted(dict(registry.task_aliases).items()),
        sorted(getattr(pipelines, "REMOVED_TASKS", {{}}).items()),
    ))

folder, out = {folder!r}, {{}}
before = snapshot()
config = AutoConfig.from_pretrained(folder, trust_remote_code=True)  # imports the folder's configuration_vaswani
out["config"] = [type(config).__module__, snapshot() == before]
model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True)  # and its modeling and decoding files
out["model"] = snapshot() == before
try:  # objects in memory, before any pipeline was asked for: transformers' own answer, as for a Marian model
    pipeline("translation", model=model, tokenizer=AutoTokenizer.from_pretrained(folder))
except KeyError as error:
    out["memory"] = str(error)
pipe = pipeline("translation_en_to_de", model=folder, trust_remote_code=True, device="cpu")
out["pipeline"] = [type(pipe).__name__, snapshot() == before]
print("RESULT" + json.dumps(out))
"""


def test_loading_the_hub_files_changes_nothing_in_transformers_until_a_pipeline_is_asked_for(hub_folder, tmp_path):
    """In a fresh interpreter without the package, loading a folder's config and model with `trust_remote_code` (the
    Hub files configuration_vaswani.py, modeling_vaswani.py, ...) leaves transformers' task tables (SUPPORTED_TASKS,
    the registry's tasks and aliases, REMOVED_TASKS) exactly as they were, as loading a Marian model would, and the
    objects in memory get transformers' own refusal of "translation". Asking `transformers.pipeline` for a folder's
    pipeline is what registers the task names."""
    env = {**SUBPROCESS_ENV, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules")}
    printed = run_python(SNAPSHOTS.format(folder=str(hub_folder)), cwd=tmp_path, env=env, block_package=True)
    out = json.loads(printed.split("RESULT", 1)[1])
    module, unchanged = out["config"]
    assert module.startswith("transformers_modules.") and unchanged
    assert out["model"] is True
    assert "The task translation has been removed from transformers" in out["memory"]
    assert out["pipeline"] == ["VaswaniTranslationPipeline", False]  # registered where the pipeline was asked for
