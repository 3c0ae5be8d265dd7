"""Every tool that reads a model folder accepts the checkpoint formats transformers writes: a sharded save
(`save_pretrained(max_shard_size=...)`: model-0000k-of-0000n.safetensors and model.safetensors.index.json) runs as
the single-file folder does and writes the same files (what a tool prints may name the weight files: an upload's
dry run lists the shards). Which tools read a model folder is not listed here: a tool
does where its own declaration (vaswani_hf.cli.registry's `Command.paths`) gives its test file's command line an
input of a model-folder kind. Averaging sharded checkpoints gives the same average, tensor for tensor.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
import safetensors.torch
from cli_contract import TOOLS, every_tool, run_main

from vaswani_hf.cli.command import MODEL_FOLDER, MODEL_WITHOUT_TOKENIZER, SAFETENSORS_CHECKPOINT
from vaswani_hf.cli.registry import COMMANDS
from vaswani_hf.io import WEIGHTS, WEIGHTS_INDEX, UsageError, weight_files
from vaswani_hf.training.checkpoints import average_checkpoints

pytest_plugins = ["cli_assets"]
pytestmark = pytest.mark.usefixtures("one_torch_thread")

MODEL_KINDS = (MODEL_FOLDER, MODEL_WITHOUT_TOKENIZER, SAFETENSORS_CHECKPOINT)


def model_folder_inputs(tool: str, argv: list[str]) -> list[str]:
    """The paths of `argv` that the tool declares as model folders (its inputs of a model-folder kind)."""
    command = COMMANDS[tool]
    args = command.parse(argv) if command.parse else command.build_parser().parse_args(argv)
    return [str(use.path) for use in command.paths(args).inputs if use.kind in MODEL_KINDS and use.path is not None]


def sharded_copy(folder: Path, out: Path) -> Path:
    """`folder` with its weights re-saved by transformers in shards (at least two), every other file as it was."""
    from transformers import AutoModelForSeq2SeqLM

    model = AutoModelForSeq2SeqLM.from_pretrained(folder)
    size = (folder / WEIGHTS).stat().st_size
    model.save_pretrained(out, max_shard_size=size // 3)
    (out / WEIGHTS).unlink(missing_ok=True)
    for path in folder.iterdir():
        if path.is_file() and path.name != WEIGHTS:
            shutil.copyfile(path, out / path.name)
    assert (out / WEIGHTS_INDEX).is_file() and len(weight_files(out)) >= 2, sorted(p.name for p in out.iterdir())
    return out


def outputs(root: Path) -> dict[str, str]:
    """{path under `root`: sha256} of every file a run wrote."""
    files = [path for path in sorted(root.rglob("*")) if path.is_file()]
    return {str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest() for path in files}


@pytest.mark.parametrize("tool", TOOLS)
def test_every_tool_that_reads_a_model_folder_takes_a_sharded_one(tool, assets, tmp_path, capfd):
    argv = [str(a) for a in every_tool()[tool].run(assets, tmp_path / "single")]
    folders = model_folder_inputs(tool, argv)
    if not folders:
        pytest.skip(f"{tool} reads no model folder")
    (tmp_path / "single").mkdir()
    assert run_main(tool, argv)[0] == 0, capfd.readouterr().err
    sharded = {f: sharded_copy(Path(f), tmp_path / "sharded" / Path(f).relative_to(assets.root)) for f in folders}
    argv = [str(a) for a in every_tool()[tool].run(assets, tmp_path / "both")]
    argv = [str(sharded.get(a, a)) for a in argv]
    (tmp_path / "both").mkdir()
    assert run_main(tool, argv)[0] == 0, capfd.readouterr().err
    assert outputs(tmp_path / "both") == outputs(tmp_path / "single")


def test_averaging_sharded_checkpoints_gives_the_same_average(assets, tmp_path):
    checkpoints = [assets.run / "checkpoint-2", assets.run / "checkpoint-4"]
    sharded = [sharded_copy(c, tmp_path / "run" / c.name) for c in checkpoints]
    expected = average_checkpoints(checkpoints)
    for folders in (sharded, [sharded[0], checkpoints[1]]):  # all sharded, and one of each
        averaged = average_checkpoints(folders)
        assert averaged.keys() == expected.keys()
        for name, tensor in expected.items():
            assert averaged[name].dtype == tensor.dtype and bool((averaged[name] == tensor).all()), name
    loaded = safetensors.torch.load_file(str(checkpoints[0] / WEIGHTS))
    assert not all(bool((loaded[name] == expected[name]).all()) for name in expected)  # an average, not a copy
    shutil.copytree(sharded[0], tmp_path / "copy")
    with pytest.raises(UsageError, match="the weight shards of .*copy are the same files as, or hold exactly the"):
        average_checkpoints([sharded[0], tmp_path / "copy"])  # one sharded checkpoint given twice
