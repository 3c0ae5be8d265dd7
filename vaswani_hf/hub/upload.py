"""Upload a model folder to the Hugging Face Hub in one commit, after checking that it gives a usable repository.

The upload calls `HfApi.create_repo`, then `HfApi.create_commit` with exactly the files `list_upload_files` lists,
in one commit: weights as safetensors, config with auto_map, code, tokenizer, generation config, metrics, card and
handler. Checkpoints, optimizer states and pickled weights are never uploaded. A card written before the repository
was known shows `path/to/model` in its usage snippets; the uploaded card names the repository instead (the folder's
own file is left as it is).

`check_folder` refuses, before any network call and in a dry run too, a folder that would give an unusable
repository: missing or truncated weights, a broken config.json, a missing tokenizer, card or code file, a code file
that does not compile, a JSON file that does not parse or has the wrong shape, generation settings out of their
bounds, a tokenizer that does not load or is not the model's, and an invalid repository id or revision. The token
comes from the `token` argument, `HF_TOKEN` or the cached login (huggingface_hub resolves it) and is never printed.
Network and authentication failures raise one-line `RunFailure`s.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

from huggingface_hub import ModelCard
from huggingface_hub.errors import HTTPError
from transformers import AutoTokenizer

from ..io import RunFailure, UsageError, check_model_folder, check_same_vocabulary, read_json
from ..io.files import COUNT, FileShape, Obj, check_shape
from ..io.models import check_special_ids, declared_files
from .card import LOCAL_REPO_ID, METRICS_FILE
from .folder import missing_code_files
from .ids import repo_id_problem

DEFAULT_COMMIT_MESSAGE = "Upload Vaswani Transformer (weights, code, tokenizer, card)"


def list_upload_files(model_dir: str | os.PathLike) -> list[tuple[str, int]]:
    """Return the files `push_folder` uploads from `model_dir`, as a sorted list of (path in repo, size in bytes).

    They are the folder's declared files (`io.models.declared_files`). Anything else (checkpoints, optimizer states,
    pickled weights, logs) stays local, and the dry run names it.
    """
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise UsageError(
            f"model folder not found: {model_dir}"
            if not model_dir.exists()
            else f"model folder {model_dir} is a file; give the folder that holds config.json"
        )
    chosen, _ = declared_files(model_dir)
    return [(name, (model_dir / name).stat().st_size) for name in chosen]


def check_folder(
    model_dir: str | os.PathLike,
    files: list[tuple[str, int]] | None = None,
    *,
    repo_id: str | None = None,
    revision: str | None = None,
) -> list[str]:
    """Return the problems that would make the uploaded repository unusable, each naming its file, or an empty list.

    The problems checked for are:

    - an invalid `repo_id`, or a `revision` that breaks git's rules for a branch name;
    - an uploaded *.json that does not parse or lacks its declared shape (`UPLOAD_JSON_SHAPES`), or a *.py that does
      not compile;
    - no card, or a card whose metadata does not parse;
    - whatever loading would refuse (`check_model_folder` checks config.json, missing or truncated safetensors
      weights, tokenizer.json and generation settings out of their declared bounds), and a tokenizer of another
      vocabulary size than the model's;
    - a vaswani config.json without its auto_map;
    - a code file that config.json or another code file needs, but that is absent or lacks the class auto_map names;
    - a tokenizer that transformers cannot load, or whose special tokens are not the config's ids.
    """
    model_dir = Path(model_dir)
    names = {name for name, _ in (files if files is not None else list_upload_files(model_dir))}
    problems = []
    problem = None if repo_id is None else repo_id_problem(repo_id)
    if problem:
        problems.append(f"repository id {repo_id!r} is invalid ({problem}); give 'name' or 'namespace/name'")
    problems += [p for p in [revision_problem(revision)] if p] + _file_problems(model_dir, names)
    if "README.md" not in names:
        problems.append("no README.md model card (vaswani_hf.hub.write_model_card writes one)")
    else:
        try:
            ModelCard((model_dir / "README.md").read_text(encoding="utf-8"))
        except Exception as error:  # noqa: BLE001 - any parse error of the card is reported.
            problems.append(f"README.md metadata does not parse: {' '.join(str(error).split())}")
    try:
        config = read_json(check_model_folder(model_dir) / "config.json")
        check_same_vocabulary(model_dir, model_dir)
    except UsageError as error:
        return problems + [str(error)]
    if config.get("model_type") == "vaswani" and not {"AutoConfig", "AutoModelForSeq2SeqLM"} <= set(
        config.get("auto_map") or {}
    ):
        problems.append(
            "config.json has no auto_map for AutoConfig/AutoModelForSeq2SeqLM (import vaswani_hf "
            "before save_pretrained: it registers the classes for remote code)"
        )
    problems += missing_code_files(model_dir, names)
    if problems:
        return problems
    try:  # Load the tokenizer as transformers loads it, because its special tokens must be the config's ids.
        check_special_ids(config, AutoTokenizer.from_pretrained(str(model_dir)), str(model_dir))
    except UsageError as error:
        return [str(error)]
    except Exception as error:  # noqa: BLE001 - transformers raises many kinds of error on a broken tokenizer file.
        return [
            f"{model_dir}: the tokenizer (tokenizer.json, tokenizer_config.json) does not load "
            f"({' '.join(str(error).split())[:200]}); save the tokenizer into the folder again"
        ]
    return []


# The declared shape of the JSON files uploaded beside the model that no loader checks (the model folder's own are
# `check_model_folder`'s). Any other *.json uploaded must at least parse.
_FIX = "write the folder again (save_hub_folder / vaswani-train) or fix the file"
UPLOAD_JSON_SHAPES = {
    **{
        name: FileShape(name, Obj(), _FIX)
        for name in (
            METRICS_FILE,
            "training_metrics.json",
            "all_results.json",
            "eval_results.json",
            "train_results.json",
            "test_results.json",
            "scores.json",
        )
    },
    **{name: FileShape(name, Obj(extra=COUNT), _FIX) for name in ("added_tokens.json", "vocab.json")},
}
# git check-ref-format's rules for a branch name, checked here because huggingface_hub does not validate a revision
# before it sends a request.
_BAD_REF_CHARACTERS = set(" ~^:?*[\\\x7f") | {chr(i) for i in range(32)}


def revision_problem(revision: str | None) -> str | None:
    """Return why `revision` is not a valid git branch name by git check-ref-format's rules, or None if it is valid.

    A `revision` of None is valid.
    """
    if revision is None:
        return None
    problem = None
    if not revision or revision == "@":
        problem = "it is empty" if not revision else "'@' is not a branch name"
    elif set(revision) & _BAD_REF_CHARACTERS:
        problem = "spaces, control characters and ~ ^ : ? * [ \\ are not allowed"
    elif ".." in revision or "@{" in revision or "//" in revision:
        problem = "'..', '@{' and '//' are not allowed"
    elif revision.startswith(("/", ".")) or revision.endswith(("/", ".", ".lock")):
        problem = "it must not start with '/' or '.', nor end with '/', '.' or '.lock'"
    elif any(part.startswith(".") or part.endswith(".lock") for part in revision.split("/")):
        problem = "no path component may start with '.' or end with '.lock'"
    if problem is None:
        return None
    return f"revision {revision!r} is not a valid branch name ({problem}); give a name such as 'main' or 'v1'"


# The model folder's own files, which `check_model_folder` reads: they are left out of `_file_problems`, so that each
# problem is named once.
_CHECKED_ELSEWHERE = {
    "config.json",
    "tokenizer.json",
    "model.safetensors.index.json",
    "generation_config.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
}


def _file_problems(model_dir: Path, names: set[str]) -> list[str]:
    """Return the problems of the uploaded *.json and *.py files that `check_model_folder` does not read.

    Each *.json must parse and have its declared shape (`UPLOAD_JSON_SHAPES`), and each *.py must compile. The Hub's
    users run the code files under trust_remote_code, where a syntax error would surface only on the user's machine.
    """
    problems = []
    for name in sorted(names - _CHECKED_ELSEWHERE):
        path = model_dir / name
        try:
            if name.endswith(".json"):
                data = read_json(path, what=name)
                if name in UPLOAD_JSON_SHAPES:
                    check_shape(data, UPLOAD_JSON_SHAPES[name], path)
            elif name.endswith(".py"):
                compile(path.read_bytes(), str(path), "exec")
        except UsageError as error:
            problems.append(str(error))
        except (SyntaxError, ValueError) as error:  # A ValueError means null bytes in the source.
            line = f":{error.lineno}" if getattr(error, "lineno", None) else ""
            problems.append(
                f"{path}{line}: does not compile ({getattr(error, 'msg', None) or error}); fix the file "
                "or write the folder again"
            )
    return problems


def _format_size(size: float) -> str:
    for unit in ("B", "KB", "MB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"


def _uploaded_content(model_dir: Path, name: str, repo_id: str) -> str | bytes:
    """Return what is uploaded as `name`: the file's path, or for the card, its text with the usage snippets naming
    `repo_id` where they still show the local placeholder, so that the published instructions load this repository."""
    path = model_dir / name
    if name != "README.md":
        return str(path)
    text = path.read_text(encoding="utf-8")
    return text.replace(f'"{LOCAL_REPO_ID}"', f'"{repo_id}"').encode("utf-8")


def _print_dry_run(model_dir: Path, files, repo_id: str, private: bool, revision: str | None, out) -> None:
    total = sum(size for _, size in files)
    print(
        f"dry run: would upload {len(files)} files ({_format_size(total)}) to {repo_id}"
        f"{' (private)' if private else ''} @ {revision or 'main'} in one commit:",
        file=out,
    )
    for name, size in files:
        print(f"  {name}  {size} bytes ({_format_size(size)})", file=out)
    skipped = [name + "/" * (model_dir / name).is_dir() for name in declared_files(model_dir)[1]]
    if skipped:
        print("not uploaded: " + ", ".join(skipped), file=out)


@contextlib.contextmanager
def _network_failures(repo_id: str, token: str | None):
    """Turn huggingface_hub's HTTP, connection and offline-mode errors into a one-line RunFailure, with the token
    blanked out of the message."""
    try:
        yield
    except (HTTPError, OSError) as error:
        from huggingface_hub import get_token

        text = " ".join(str(error).split()) or type(error).__name__
        for secret in {token, get_token()} - {None, ""}:
            text = text.replace(secret, "***")
        raise RunFailure(f"upload to {repo_id} failed: {text}") from error


def push_folder(
    model_dir: str | os.PathLike,
    repo_id: str,
    private: bool = False,
    revision: str | None = None,
    token: str | None = None,
    dry_run: bool = False,
    commit_message: str = DEFAULT_COMMIT_MESSAGE,
    commit_description: str | None = None,
    out=None,
):
    """Upload the files of `list_upload_files(model_dir)` to `repo_id` in ONE commit (`HfApi.upload_folder`).

    The repository is created if needed (`private` applies only then), and so is the branch `revision`. The token is
    `token`, else `HF_TOKEN`, else the cached login (`hf auth login`); it is never printed. With `dry_run` the files
    (path, size) are printed and returned without any network call. Returns the `CommitInfo` of the commit. Raises
    UsageError (a ValueError) if the folder or the repository id would give an unusable repository (`check_folder`),
    and RunFailure (a RuntimeError) without a token or when the Hub cannot be reached or refuses the upload."""
    from huggingface_hub import CommitOperationAdd, HfApi, get_token

    out = out or sys.stdout
    model_dir = Path(model_dir)
    files = list_upload_files(model_dir)
    problems = check_folder(model_dir, files, repo_id=repo_id, revision=revision)
    if problems:
        raise UsageError(f"{model_dir} is not ready to upload: " + "; ".join(problems))
    if dry_run:
        _print_dry_run(model_dir, files, repo_id, private, revision, out)
        return files
    if token is None and get_token() is None:
        raise RunFailure("no Hugging Face token: set HF_TOKEN or run `hf auth login` (the token is never printed)")
    api = HfApi(token=token)
    with _network_failures(repo_id, token):
        user = api.whoami()
        print(f"authenticated as {user.get('name', '?')}", file=out)
        repo_url = api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
        if revision not in (None, "main"):
            api.create_branch(repo_id, branch=revision, exist_ok=True, repo_type="model")
        info = api.create_commit(
            repo_id=repo_id,
            operations=[
                CommitOperationAdd(path_in_repo=name, path_or_fileobj=_uploaded_content(model_dir, name, repo_id))
                for name, _ in files
            ],
            repo_type="model",
            revision=revision,
            commit_message=commit_message,
            commit_description=commit_description,
        )
    print(f"uploaded {len(files)} files to {repo_url} in commit {info.oid}", file=out)
    return info
