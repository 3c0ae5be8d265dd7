"""The private transformers hooks the package relies on, pinned. The one list of them, with why each is needed and
which tests pin it, is tests/transformers_hooks.py (`HOOKS`): the package's code is read here, and a private name of
transformers (or accelerate) it uses without a line there fails. transformers may rename, re-sign or stop calling any
of them in a release; then an override is silently dead (the paper's decoding quietly replaced by transformers' own)
or breaks deep inside a call. Each test here names the hook and fails loudly instead: the hook still exists, takes
the arguments we read, and transformers still reaches it on the path we rely on."""

import functools
import inspect
import re

import pytest
import torch
import transformers.pipelines as pipelines
from conftest import padded_batch, tiny_config
from transformers import GenerationMixin, Pipeline
from transformers.generation import utils as generation_utils
from transformers.pipelines import base as pipeline_base
from transformers_hooks import HOOKS, REPO, owner_of, private_library_names_used

from vaswani_hf import generation_vaswani
from vaswani_hf.generation_vaswani import VaswaniGenerationMixin
from vaswani_hf.modeling_vaswani import VaswaniForConditionalGeneration
from vaswani_hf.pipeline_vaswani import VaswaniTranslationPipeline

# hook -> the parameters our override (or paper_decoding's call of transformers' loop) reads or passes on by name
GENERATION_HOOKS = {
    "_beam_search": {"input_ids", "logits_processor", "stopping_criteria", "generation_config", "synced_gpus"},
    "_sample": {"input_ids", "logits_processor", "stopping_criteria", "generation_config", "synced_gpus"},
    "_get_top_k_continuations": {
        "accumulated_log_probs",
        "running_sequences",
        "running_beam_indices",
        "cur_len",
        "decoder_prompt_len",
        "do_sample",
        "beams_to_keep",
        "num_beams",
        "batch_size",
    },
    "_update_finished_beams": {"topk_log_probs", "cur_len", "decoder_prompt_len", "length_penalty"},
    "_check_early_stop_heuristic": {
        "running_beam_scores",
        "cur_len",
        "max_length",
        "decoder_prompt_len",
        "early_stopping",
        "length_penalty",
    },
    "adjust_generation_fn": {"generation_config", "from_auto_class", "from_pipeline", "pretrained_model_name_or_path"},
    "_gather_beams": {"tensor", "beam_indices"},  # called by our `_get_top_k_continuations`
}


def _beam_search_source() -> str:
    return inspect.getsource(GenerationMixin._beam_search)


@pytest.mark.parametrize("hook", sorted(GENERATION_HOOKS))
def test_each_generation_hook_still_exists_with_the_parameters_we_use(hook):
    assert hasattr(GenerationMixin, hook), f"transformers' GenerationMixin no longer has {hook}"
    parameters = set(inspect.signature(getattr(GenerationMixin, hook)).parameters)
    missing = GENERATION_HOOKS[hook] - parameters
    assert not missing, f"GenerationMixin.{hook} lost the parameters {sorted(missing)} that our override uses"


def test_generate_still_dispatches_to_beam_search_and_sample_by_name():
    """paper_decoding falls back to transformers' own loop by its name in GENERATION_MODES_MAPPING, as generate()
    finds it."""
    mapping = generation_utils.GENERATION_MODES_MAPPING
    assert mapping[generation_utils.GenerationMode.BEAM_SEARCH] == "_beam_search"
    assert mapping[generation_utils.GenerationMode.GREEDY_SEARCH] == "_sample"
    assert "GENERATION_MODES_MAPPING[generation_mode]" in inspect.getsource(GenerationMixin.generate)


def test_generate_still_hands_its_loop_to_a_custom_generate_callable():
    """The public hook `paper_decoding` relies on: generate() takes a callable `custom_generate`, prepares the
    inputs, processors and criteria, then calls it as the decoding loop with the prepared generation config."""
    assert "custom_generate" in inspect.signature(GenerationMixin.generate).parameters
    source = inspect.getsource(GenerationMixin.generate)
    assert "decoding_method = custom_generate" in source and "result = decoding_method(" in source


def test_plain_decoding_runs_paper_decoding_and_a_streamer_runs_transformers_loop(monkeypatch):
    """Beam search and greedy decoding go through `paper_decoding` (custom_generate); a streamer, which transformers
    hands only to its own loops, keeps them, and still receives every token."""
    from transformers.generation.streamers import BaseStreamer

    calls, received = [], []
    original = generation_vaswani.paper_decoding

    @functools.wraps(original)
    def spy(*args, **kwargs):
        calls.append(kwargs["generation_config"].num_beams)
        return original(*args, **kwargs)

    class Streamer(BaseStreamer):
        def put(self, value):
            received.append(value)

        def end(self):
            received.append("end")

    monkeypatch.setattr(generation_vaswani, "paper_decoding", spy)
    model = VaswaniForConditionalGeneration(tiny_config(vocab_size=24)).eval()
    ids, mask = padded_batch([5], vocab_size=24)
    beam = model.generate(input_ids=ids, attention_mask=mask, num_beams=3, max_length_b=4)
    greedy = model.generate(input_ids=ids, attention_mask=mask, num_beams=1, max_length_b=4)
    assert calls == [3, 1] and beam.shape[0] == greedy.shape[0] == 1
    streamed = model.generate(input_ids=ids, attention_mask=mask, num_beams=1, max_length_b=4, streamer=Streamer())
    assert calls == [3, 1] and torch.equal(streamed, greedy) and received[-1] == "end"
    assert len(received) == streamed.shape[1] + 1  # the start token, each generated token, the end


@pytest.mark.parametrize("hook", ["_get_top_k_continuations", "_update_finished_beams", "_check_early_stop_heuristic"])
def test_beam_search_still_calls_the_scoring_hooks_with_keywords(hook):
    """Our `_update_finished_beams` / `_check_early_stop_heuristic` take `**kwargs` only: transformers must pass
    every argument by name, as `self.<hook>(name=...)`."""
    source = _beam_search_source()
    call = f"self.{hook}("
    assert call in source, f"GenerationMixin._beam_search no longer calls {hook}"
    arguments = source.split(call, 1)[1].split(")", 1)[0]
    for name in GENERATION_HOOKS[hook]:
        assert f"{name}=" in arguments, f"_beam_search no longer passes {name}= to {hook}"


def test_beam_search_still_reorders_the_cache_through_the_model():
    assert "self._reorder_cache(" in _beam_search_source()


def test_generate_state_the_lean_loops_read_is_still_set():
    """The lean loops read `generation_config._eos_token_tensor` / `_pad_token_tensor`, set by
    `_prepare_special_tokens`."""
    source = inspect.getsource(GenerationMixin._prepare_special_tokens)
    assert "generation_config._eos_token_tensor =" in source
    assert "generation_config._pad_token_tensor =" in source


def test_from_pretrained_still_calls_adjust_generation_fn():
    from transformers import modeling_utils

    assert "model.adjust_generation_fn(" in inspect.getsource(modeling_utils.PreTrainedModel.from_pretrained)


def test_transformers_beam_loop_reaches_every_override(monkeypatch):
    """With the lean loop off, `paper_decoding` runs transformers' own beam loop, which reaches each of our overrides
    (mock-call spies on the real methods); greedy decoding runs transformers' `_sample` the same way."""
    calls = []
    for hook in (
        "_get_top_k_continuations",
        "_update_finished_beams",
        "_check_early_stop_heuristic",
        "_reorder_cache",
    ):
        original = getattr(VaswaniGenerationMixin, hook)

        def spy(self, *args, _original=original, _hook=hook, **kwargs):
            calls.append(_hook)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(VaswaniGenerationMixin, hook, spy)
    for loop in ("_beam_search", "_sample"):
        original = getattr(GenerationMixin, loop)

        @functools.wraps(original)  # generate() reads _sample's signature to sort a custom loop's arguments
        def loop_spy(self, *args, _original=original, _loop=loop, **kwargs):
            calls.append(_loop)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(GenerationMixin, loop, loop_spy)
    torch.manual_seed(0)
    model = VaswaniForConditionalGeneration(tiny_config(vocab_size=24)).eval()
    model.use_lean_decoding = False
    ids, mask = padded_batch([5, 3], vocab_size=24)
    model.generate(input_ids=ids, attention_mask=mask, num_beams=3, max_length_b=4, length_penalty_type="gnmt")
    assert set(calls) == {
        "_beam_search",
        "_get_top_k_continuations",
        "_update_finished_beams",
        "_check_early_stop_heuristic",
        "_reorder_cache",
    }, calls
    calls.clear()
    model.generate(input_ids=ids, attention_mask=mask, num_beams=1, max_length_b=4)
    assert calls == ["_sample"]


# --- the pipeline ----------------------------------------------------------------------------------------------------

PIPELINE_FLAGS = (
    "_pipeline_calls_generate",
    "_load_tokenizer",
    "_load_processor",
    "_load_image_processor",
    "_load_feature_extractor",
    "_load_video_processor",
)


@pytest.mark.parametrize("flag", PIPELINE_FLAGS)
def test_each_pipeline_flag_still_exists_and_is_read(flag):
    """`Pipeline` declares each flag, and `pipeline()` or `Pipeline.__init__` still reads it."""
    assert hasattr(Pipeline, flag), f"transformers' Pipeline no longer declares {flag}"
    readers = inspect.getsource(pipelines.pipeline) + inspect.getsource(Pipeline.__init__)
    assert f'"{flag}"' in readers or f"self.{flag}" in readers, f"transformers no longer reads Pipeline.{flag}"


def test_pipeline_init_still_sets_aside_generate_arguments():
    """Our constructor's refusal reads `_generate_kwargs`; our `_forward` merges through `_prepare_generate_kwargs`."""
    init = inspect.getsource(Pipeline.__init__)
    assert "self._pipeline_calls_generate" in init and "self._generate_kwargs" in init
    assert list(inspect.signature(Pipeline._prepare_generate_kwargs).parameters)[:2] == ["self", "generate_kwargs"]


@pytest.mark.parametrize("method", ["_sanitize_parameters", "preprocess", "_forward", "postprocess"])
def test_pipeline_still_calls_the_methods_we_override(method):
    source = inspect.getsource(pipeline_base)
    assert f"self.{method}(" in source, f"transformers' Pipeline no longer calls {method}"


def test_pipeline_registry_still_works_as_register_pipeline_tasks_patches_it():
    """`register_pipeline_tasks` takes names out of `REMOVED_TASKS` (checked by `_resolve_deprecated_task` before the
    registry) and replaces `task_aliases` by a dict the registry reads with `in` and `[]` only; `register_pipeline`
    sets `_registered_impl`, which `save_pretrained` writes."""
    assert "REMOVED_TASKS" in inspect.getsource(pipelines._resolve_deprecated_task)
    check = inspect.getsource(pipeline_base.PipelineRegistry.check_task)
    assert "in self.task_aliases" in check and "self.task_aliases[task]" in check
    assert "._registered_impl =" in inspect.getsource(pipeline_base.PipelineRegistry.register_pipeline)
    assert "self._registered_impl" in inspect.getsource(Pipeline.save_pretrained)
    assert set(inspect.signature(pipeline_base.PipelineRegistry.register_pipeline).parameters) >= {
        "task",
        "pipeline_class",
        "pt_model",
        "type",
    }
    assert issubclass(VaswaniTranslationPipeline, Pipeline)


def test_pipeline_still_loads_the_config_with_from_pipeline_before_it_resolves_the_task():
    """`pipeline()` loads a folder's config with `_from_pipeline=task` before it refuses a removed task name, and
    AutoConfig hands its keywords on to a remote config class's `from_pretrained` (`VaswaniConfig.from_pretrained`
    registers the task names there)."""
    from transformers.models.auto.configuration_auto import AutoConfig

    source = inspect.getsource(pipelines.pipeline)
    assert "AutoConfig.from_pretrained(model, _from_pipeline=task" in source
    assert source.index("_from_pipeline=task") < source.index("_resolve_deprecated_task(task)")
    assert "config_class.from_pretrained(pretrained_model_name_or_path, **kwargs)" in inspect.getsource(
        AutoConfig.from_pretrained
    )


# --- the one list of private names (tests/transformers_hooks.py) -----------------------------------------------------


def test_every_private_library_name_the_package_uses_is_listed_with_why():
    """Read from the package's code: each private name of transformers or accelerate it overrides, reads, sets,
    calls or passes is listed in `HOOKS`, for each file that uses it; and each listed name is still used there."""
    used = private_library_names_used()
    unlisted = sorted(f"{name} ({', '.join(sorted(files))})" for name, files in used.items() if name not in HOOKS)
    assert not unlisted, (
        f"add these to tests/transformers_hooks.py with why and a pin, or use a public mechanism: {unlisted}"
    )
    for name, files in used.items():
        assert files <= set(HOOKS[name].where), (name, files)
    for name, hook in HOOKS.items():
        for where in hook.where:
            assert name in (REPO / "vaswani_hf" / where).read_text(encoding="utf-8"), f"{name} is no longer in {where}"
        assert hook.use in ("overridden", "read", "set", "called", "keyword", "patched") and hook.why, name


@pytest.mark.parametrize("name", sorted(HOOKS))
def test_each_hook_is_still_where_transformers_keeps_it(name):
    """The library object the table names still has the name (an attribute, a parameter, or a name its code sets or
    reads), and every pin the table names is a test that exists."""
    owner = owner_of(HOOKS[name])
    source = inspect.getsource(owner)
    assert hasattr(owner, name) or re.search(rf"\b{name}\b", source), f"{HOOKS[name].owner} no longer has {name}"
    for pin in HOOKS[name].pinned_by:
        path, _, test = pin.partition("::")
        assert re.search(rf"^def {test}\(", (REPO / path).read_text(encoding="utf-8"), re.M), pin
