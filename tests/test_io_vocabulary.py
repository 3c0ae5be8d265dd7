"""One vocabulary for tokenizer and weights (vaswani_hf.io.models), and the upload's check of it. The exports' own
refusals: tests/test_export_ctranslate2.py and tests/test_export_marian.py."""

import pytest
from hub_helpers import copy_folder

from vaswani_hf import hub
from vaswani_hf.io import UsageError, check_same_vocabulary, model_vocab_size, tokenizer_size
from vaswani_hf.tokenization import train_bpe_tokenizer


def test_sizes_read_from_files_equal_the_loaded_objects(tiny):
    assert tokenizer_size(tiny["folder"]) == tokenizer_size(tiny["tokenizer"]) == len(tiny["tokenizer"])
    assert model_vocab_size(tiny["folder"]) == model_vocab_size(tiny["model"]) == tiny["model"].config.vocab_size
    check_same_vocabulary(tiny["folder"], tiny["folder"])
    check_same_vocabulary(tiny["model"], tiny["tokenizer"])


def test_another_vocabulary_is_one_line_naming_both_and_both_sizes(tiny, tmp_path):
    other = train_bpe_tokenizer(["a b"], vocab_size=300, show_progress=False)
    other.save_pretrained(tmp_path / "other")
    with pytest.raises(UsageError) as error:
        check_same_vocabulary(tiny["folder"], tmp_path / "other")
    message = str(error.value)
    assert message.startswith(
        f"the tokenizer in {tmp_path / 'other'} has {len(other)} tokens but the model in "
        f"{tiny['folder']} has vocab_size {tiny['model'].config.vocab_size}: "
    )
    assert "\n" not in message
    with pytest.raises(UsageError, match=r"^the given tokenizer has \d+ tokens but the given model has vocab_size"):
        check_same_vocabulary(tiny["model"], other)


def test_a_broken_tokenizer_file_is_named(tmp_path):
    (tmp_path / "tokenizer.json").write_text('{"version": "1.0"}', encoding="utf-8")
    with pytest.raises(UsageError, match=r"tokenizer\.json: not a tokenizer file"):
        tokenizer_size(tmp_path)


def test_the_upload_refuses_a_folder_whose_tokenizer_is_of_another_vocabulary(tiny, tmp_path):
    folder = copy_folder(tiny["folder"], tmp_path / "model")
    assert hub.check_folder(folder) == []
    train_bpe_tokenizer(["a b"], vocab_size=300, show_progress=False).save_pretrained(tmp_path / "other")
    (folder / "tokenizer.json").write_bytes((tmp_path / "other" / "tokenizer.json").read_bytes())
    problems = hub.check_folder(folder)
    assert problems == [
        f"the tokenizer in {folder} has 260 tokens but the model in {folder} has vocab_size "
        f"{tiny['model'].config.vocab_size}: they are not one vocabulary; pair the model with the "
        "tokenizer it was trained with"
    ]
    with pytest.raises(UsageError, match="is not ready to upload: the tokenizer in"):
        hub.push_folder(folder, "org/name", dry_run=True)
