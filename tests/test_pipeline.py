"""The "translation" pipeline (`vaswani_hf.pipeline_vaswani`, built and saved by `vaswani_hf.translation.inference`): it gives what
`translate` gives, in this process and from a saved folder in a process that cannot import vaswani_hf."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
from translation_model import SUBPROCESS_ENV

from vaswani_hf.pipeline_vaswani import TASKS, register_pipeline_tasks
from vaswani_hf.translation.inference import register_pipeline, translate, translation_pipeline

# one torch thread for the module's tiny models (translation_model.one_thread)
pytestmark = pytest.mark.usefixtures("one_thread")


def test_translation_pipeline_helper(model, tokenizer):
    pipe = translation_pipeline(model, tokenizer, num_beams=1)
    expected = translate(model, tokenizer, ["dog", "", "a man runs"], num_beams=1, progress=False)
    assert [r["translation_text"] for r in pipe(["dog", "", "a man runs"], batch_size=2)] == expected
    assert pipe("dog") == [{"translation_text": expected[0]}]


def test_register_pipeline_is_idempotent():
    from transformers.pipelines import PIPELINE_REGISTRY

    from vaswani_hf.pipeline_vaswani import VaswaniTranslationPipeline

    register_pipeline()
    register_pipeline()
    register_pipeline_tasks()
    for task in TASKS:
        assert PIPELINE_REGISTRY.supported_tasks[task]["impl"] is VaswaniTranslationPipeline
    # Pipeline.save_pretrained writes the one task config.json names (`pipeline(model=folder)` infers it)
    assert set(VaswaniTranslationPipeline._registered_impl) == {"translation"}


def test_text2text_generation_records_are_keyed_as_transformers_4_keyed_them(model, tokenizer):
    from vaswani_hf.pipeline_vaswani import VaswaniTranslationPipeline

    pipe = VaswaniTranslationPipeline(model=model, tokenizer=tokenizer, task="text2text-generation", num_beams=1)
    expected = translate(model, tokenizer, ["dog", ""], num_beams=1, progress=False)
    assert pipe(["dog", ""]) == [{"generated_text": text} for text in expected]
    assert set(pipe("dog", return_tensors=True)[0]) == {"generated_text", "generated_token_ids"}


def test_pipeline_from_saved_folder_without_the_package(model, tokenizer, saved_folder, tmp_path):
    """`pipeline("translation", model=folder, trust_remote_code=True)` in a fresh process that cannot import
    vaswani_hf: the remote-code pipeline, model (GNMT beam search included) and tokenizer reproduce translate()."""
    config = json.loads((saved_folder / "config.json").read_text())
    assert set(config["custom_pipelines"]) == {"translation"}  # as the config names it, whoever saves it
    assert config["custom_pipelines"]["translation"]["impl"] == "pipeline_vaswani.VaswaniTranslationPipeline"
    assert (saved_folder / "pipeline_vaswani.py").is_file()
    inputs = ["dog", "", "the big red ball near water with a child", "a man runs in the park"]
    code = textwrap.dedent(f"""
        import json, sys

        class BlockVaswani:
            def find_spec(self, name, path=None, target=None):
                if name == "vaswani_hf" or name.startswith("vaswani_hf."):
                    raise ImportError("vaswani_hf is blocked in this test")

        sys.meta_path.insert(0, BlockVaswani())
        try:
            import vaswani_hf
            raise SystemExit("vaswani_hf should not be importable here")
        except ImportError:
            pass
        from transformers import pipeline

        pipe = pipeline("translation", model={str(saved_folder)!r}, trust_remote_code=True, device="cpu")
        out = {{
            "beam": [r["translation_text"] for r in pipe({inputs!r}, batch_size=3)],
            "greedy": [r["translation_text"] for r in pipe({inputs!r}, num_beams=1)],
            "pipeline_module": type(pipe).__module__,
            "model_module": type(pipe.model).__module__,
            "leaked": sorted(m for m in sys.modules if m.startswith("vaswani_hf")),
        }}
        print("RESULT" + json.dumps(out))
    """)
    env = {**os.environ, **SUBPROCESS_ENV, "HF_MODULES_CACHE": str(tmp_path / "modules"), "PYTHONPATH": ""}
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.split("RESULT", 1)[1])
    assert out["leaked"] == []
    assert out["pipeline_module"].startswith("transformers_modules.")
    assert out["model_module"].startswith("transformers_modules.")
    assert out["beam"] == translate(model, tokenizer, inputs, progress=False)
    assert out["greedy"] == translate(model, tokenizer, inputs, num_beams=1, progress=False)


def test_a_folder_without_generation_config_translates_as_the_paper_through_the_pipeline(
    model, tokenizer, saved_folder, tmp_path
):
    """No generation_config.json: the pipeline decodes with the paper's settings (beam 4, alpha 0.6, input + 50) as
    the model in memory does, not with transformers' max_length 20, and without its warning."""
    import shutil
    import warnings

    from transformers import pipeline

    folder = tmp_path / "model"
    shutil.copytree(saved_folder, folder)
    (folder / "generation_config.json").unlink()
    inputs = ["dog", "the big red ball near water with a child", "a man runs in the park"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pipe = pipeline("translation", model=str(folder), trust_remote_code=True, device="cpu")
        out = [r["translation_text"] for r in pipe(inputs)]
    assert (pipe.model.generation_config.num_beams, pipe.model.generation_config.length_penalty) == (4, 0.6)
    assert out == translate(model, tokenizer, inputs, progress=False)
    assert not [w for w in caught if "max_length" in str(w.message)]


def test_an_input_over_the_models_positions_is_refused_as_the_translate_tool_refuses_it(model, tokenizer):
    """Over max_position_embeddings (1,024: the translate tool's limit) tokens, output degrades: one ValueError saying
    so, unless truncation=True cuts the input there."""
    pipe = translation_pipeline(model, tokenizer, num_beams=1, max_new_tokens=2)
    with pytest.raises(ValueError, match=r"an input of \d+ tokens, but the model takes at most 1024"):
        pipe("a " * 3000)
    assert isinstance(pipe("a " * 3000, truncation=True)[0]["translation_text"], str)
