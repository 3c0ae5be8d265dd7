"""Every tool that reads a model folder accepts the checkpoint formats transformers writes: a sharded save
(`save_pretrained(max_shard_size=...)`: model-0000k-of-0000n.safetensors and model.safetensors.index.json) runs as
the single-file folder does and writes the same files (what a tool prints may name the weight files: an upload's
dry run lists the shards). Which tools read a model folder is not listed here: every command line of each registered
tool's test file (its run and its path cases) is taken, and each input its declaration (`Command.paths`) names that
is a saved model folder is given sharded. Averaging sharded checkpoints gives the same average, tensor for tensor.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
import safetensors.torch
from cli_contract import TOOLS, every_tool, run_main

from vaswani_hf.cli.registry import COMMANDS
from vaswani_hf.io import WEIGHTS, WEIGHTS_INDEX, UsageError, weight_files
from vaswani_hf.io.averaging import average_checkpoints

pytest_plugins = ["cli_assets"]
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def model_folder_inputs(tool: str, argv: list[str]) -> list[str]:
    """The inputs the tool declares for `argv` that are saved model folders (config.json and safetensors weights),
    whatever kind the declaration gives them (evaluate's --model is checked when loaded)."""
    command = COMMANDS[tool]
    args = command.parse(argv) if command.parse else command.build_parser().parse_args(argv)
    paths = [Path(use.path) for use in command.paths(args).inputs if use.path is not None]
    return [str(path) for path in paths if (path / "config.json").is_file() and weight_files(path)]


def command_lines(tool: str, assets, folder: Path) -> list[list[str]]:
    """The tool's command lines in its test file (`Cases`: its run, then each path case), writing under `folder`."""
    case = every_tool()[tool]
    lines = [case.run(assets, folder / "run")]
    for k, path_case in enumerate(case.paths):
        lines.append(path_case.argv(path_case.inputs(folder / f"inputs-{k}", assets), str(folder / f"out-{k}"), False))
    return [[str(a) for a in line] for line in lines]


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
    single, both = command_lines(tool, assets, tmp_path / "single"), command_lines(tool, assets, tmp_path / "both")
    runs = [(line, model_folder_inputs(tool, sharded)) for line, sharded in zip(single, both)]
    if not any(folders for _, folders in runs):
        pytest.skip(f"no command line of tests/test_cli_{tool}.py reads a model folder")
    for k, (line, folders) in enumerate(runs):
        if not folders:
            continue
        (tmp_path / "single" / "run").mkdir(parents=True, exist_ok=True)
        (tmp_path / "both" / "run").mkdir(parents=True, exist_ok=True)
        assert run_main(tool, line)[0] == 0, (line, capfd.readouterr().err)
        sharded = {
            f: str(sharded_copy(Path(f), tmp_path / "sharded" / f"{k}-{i}" / Path(f).name))
            for i, f in enumerate(folders)
        }
        argv = [sharded.get(a, a) for a in both[k]]
        assert run_main(tool, argv)[0] == 0, (argv, capfd.readouterr().err)
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
