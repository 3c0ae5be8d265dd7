"""Stand-ins, written for vaswani_hf, for three modules of transformers' tests that its source distribution lacks.

transformers' tests/test_modeling_common.py imports `ExportTesterMixin` from tests/exporters/test_export.py and
`GenerationTesterMixin` from tests/generation/test_utils.py; tests/test_configuration_common.py imports
`config_common_kwargs` from tests/utils/test_configuration_utils.py. The source distribution on the package index
(what transformers_tests.py downloads) holds only tests/'s top-level files, and transformers' repository is not
reachable from CI, so these names are answered here, under those module names, and only when no full checkout is
named by VASWANI_TRANSFORMERS_TESTS (then the real modules run). None of this is transformers' code:

- `config_common_kwargs`: the settings every transformers config keeps, each at a value other than its default:
  the fields of the installed `PreTrainedConfig` (test_transformers_common.py checks that none is missing) and the
  keys of a text model's config.json that transformers 5 configs keep without declaring them (token ids,
  `tie_word_embeddings`, `is_decoder`, ...). `ConfigTester.check_config_arguments_init` builds a config from them and
  reads each back.
- `ExportTesterMixin`: the real one exports every model class with transformers' exporters (torch.export, ONNX,
  ExecuTorch, ...), and the steps of generate(), and compares the outputs. This stand-in runs the first of them:
  `torch.export` through transformers' own `DynamoExporter`, of forward and of generate()'s prefill and decode
  steps, outputs compared with the eager model's (ONNX runs in our test_ecosystem_export.py).
- `GenerationTesterMixin`: the real one is some hundred tests of `generate()` (greedy, sampling, beam search and
  beam sampling, their dictionary outputs, with and without the cache, left padding, `inputs_embeds`, continuing
  from a cache, assisted and prompt-lookup decoding, static cache and compilation, ...). None of them runs here;
  its one test says so as a skip, naming what to set, and test_generation_common_properties.py holds our own tests
  of the properties it checks that the rest of our suite did not cover.
"""

import contextlib
import copy
import unittest
import warnings

import torch

GENERATION_TESTS_NOT_RUN = (
    "transformers' GenerationTesterMixin (tests/generation/test_utils.py) is not in transformers' source "
    "distribution, so its tests of generate() did not run (greedy, sampling, beam search and beam sampling with "
    "their dictionary outputs, with and without the cache, left padding, inputs_embeds, continuing from a cache, "
    "assisted and prompt-lookup decoding, static cache and compilation); set VASWANI_TRANSFORMERS_TESTS to a "
    "checkout of transformers at the installed version to run them; our own tests of those properties: "
    "tests/test_generation_common_properties.py, tests/test_beam_search.py, tests/test_generation_vaswani.py"
)


# --- tests/utils/test_configuration_utils.py -----------------------------------------------------------------------

config_common_kwargs = {
    # The fields of transformers 5's PreTrainedConfig, each away from its default.
    "architectures": ["BertModel"],
    "output_hidden_states": True,
    "output_attentions": True,
    "return_dict": False,
    "dtype": "float16",
    "chunk_size_feed_forward": 5,
    "id2label": {0: "label"},
    "label2id": {"label": "0"},
    "problem_type": "regression",
    # Keys of a text model's config.json that transformers 5 configs keep, declared or not.
    "tie_word_embeddings": False,
    "bos_token_id": 6,
    "pad_token_id": 7,
    "eos_token_id": 8,
    "sep_token_id": 9,
    "decoder_start_token_id": 10,
    "is_decoder": True,
    "add_cross_attention": True,
    "cross_attention_hidden_size": 128,
    "tokenizer_class": "BertTokenizerFast",
    "prefix": "prefix",
    "finetuning_task": "translation",
    "task_specific_params": {"translation": "some_params"},
}


# --- tests/exporters/test_export.py --------------------------------------------------------------------------------


@contextlib.contextmanager
def runner_warning_ignored():
    """transformers 5.24's export runner reads a treespec attribute that torch 2.13 deprecates (a FutureWarning)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*children_specs", category=FutureWarning)
        yield


class ExportTesterMixin:
    """torch.export through transformers' `DynamoExporter`, outputs compared with the eager model's: the forward of
    every model class, and the prefill and decode steps of generate() that `export_for_generation` captures;
    `test_torch_exportable = False` on the test class turns both off, as for transformers' own mixin."""

    def _exported_outputs_match(self, exported, component, model, inputs):
        """An exported component's runner and the eager model on the same inputs; the graph takes the tensors (a
        flag such as use_cache was fixed when it was exported)."""
        with torch.no_grad():
            expected = model(**copy.deepcopy(inputs))
        tensors = {key: value for key, value in inputs.items() if not isinstance(value, (bool, type(None)))}
        with runner_warning_ignored():
            got = exported.runners[component](**copy.deepcopy(tensors))
        first = "logits" if "logits" in expected else "last_hidden_state"
        torch.testing.assert_close(got[first], expected[first], rtol=1e-5, atol=1e-5)

    def test_torch_export_matches_eager(self):
        if not getattr(self, "test_torch_exportable", True):
            self.skipTest(reason="test_torch_exportable is False")
        from transformers.exporters.exporter_dynamo import DynamoConfig, DynamoExporter

        config, inputs = self.model_tester.prepare_config_and_inputs_for_common()
        inputs = {**inputs, "use_cache": False}
        for model_class in self.all_model_classes:
            with self.subTest(model_class.__name__):
                model = model_class(copy.deepcopy(config)).eval()
                exported = DynamoExporter().export(model, copy.deepcopy(inputs), config=DynamoConfig())
                self._exported_outputs_match(exported, "model", model, inputs)

    def test_torch_export_for_generation_matches_eager(self):
        """vaswani_hf's lean decoding loops call the decoder layers, not `forward`, so the exporter (which records
        generate()'s calls of `forward`) finds no step to export: `use_lean_decoding = False` gives transformers' own
        loops, as a user exporting the model sets it."""
        if not getattr(self, "test_torch_exportable", True):
            self.skipTest(reason="test_torch_exportable is False")
        from transformers.exporters.exporter_dynamo import DynamoConfig, DynamoExporter
        from transformers.exporters.utils import decompose_for_generation

        config, inputs = self.model_tester.prepare_config_and_inputs_for_common()
        source = {key: inputs[key] for key in ("input_ids", "attention_mask")}
        for model_class in self.all_generative_model_classes:
            with self.subTest(model_class.__name__):
                model = model_class(copy.deepcopy(config)).eval()
                model.use_lean_decoding = False
                exported = DynamoExporter().export_for_generation(model, source, config=DynamoConfig())
                for name, (step, captured) in decompose_for_generation(model, source).items():
                    self._exported_outputs_match(exported, name, step, captured)


# --- tests/generation/test_utils.py --------------------------------------------------------------------------------


class GenerationTesterMixin:
    """Not transformers' mixin: it only reports, as a skip, that transformers' generation tests did not run."""

    def test_transformers_generation_tests(self):
        raise unittest.SkipTest(GENERATION_TESTS_NOT_RUN)
