"""Create or update a Gradio Space that serves a model repository of the Hub with `vaswani_hf.space`, the page that
translates and draws the attention maps.

The Space is written in one commit (`HfApi.create_repo(repo_type="space", space_sdk="gradio")`, then
`HfApi.upload_folder`), which holds these files:

- `app.py` is `SPACE_APP`, a few lines that start `vaswani_hf.space` (vaswani_hf/space/app.py, copied as it is).
- `README.md` is the Space's YAML front matter (`render_space_readme`): sdk gradio at `GRADIO_SDK_VERSION`, the app
  file, the licence, and `models: [MODEL_REPO_ID]`. That entry is the Hub's link from a Space to the model it uses,
  and app.py reads the model id from it (the environment variable VASWANI_MODEL overrides it).
- `requirements.txt` lists the package's own dependencies, read from its installed metadata (`space_requirements`);
  Gradio itself comes with the Space's sdk_version.
- `vaswani_hf/` is this package's source, without caches or the sample corpus, since the Hub does not install it
  otherwise.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

from ..hub.ids import repo_id_problem
from ..hub.upload import _format_size, _network_failures
from ..io import RunFailure, UsageError

# How a program calls the Space's two named endpoints (its README and the page show it).
API_EXAMPLE = """```python
from gradio_client import Client

client = Client("http://127.0.0.1:7860/")  # or the Space's id, e.g. Client("org/space")
text = client.predict("A man is riding a horse.", 4, 0.6, api_name="/translate")
view = client.predict("A man is riding a horse.", "cross", 6, "all", 4, 0.6, api_name="/attention")
view["queries"], view["keys"], view["weights"]  # weights[head][query][key] ("all") or [query][key], 4 decimals
view["warning"]  # None, or a sentence when the text looks like another language than the model's source
packed = client.predict("A man is riding a horse.", "cross", 6, "all", 4, 0.6, 4, 8, api_name="/attention")
packed["packed"], packed["shape"], packed["code"]  # base64 of one byte a weight (the page's form), and how to read it
```
A text in another language is translated with a warning: /attention's "warning", and for both endpoints a gr.Warning
(a "log" status update of `client.submit(...)`'s job)."""

GRADIO_SDK_VERSION = "6.31.0"  # The Gradio version the page is tested with; the `space` extra allows any 6.x.
PYTHON_VERSION = "3.11"
DEFAULT_SPACE_COMMIT_MESSAGE = "Upload the Vaswani Transformer Space (translation and attention maps)"
PACKAGE = "vaswani_hf"
_PACKAGE_IGNORE = ("__pycache__", "*.pyc", "sample_data")
# CPU wheels of torch, because a Space on the free CPU hardware needs no CUDA libraries (pip prefers the +cpu build).
_TORCH_INDEX = "--extra-index-url https://download.pytorch.org/whl/cpu"

# The Space's app.py is the file beside this one, copied as it is.
SPACE_APP = (Path(__file__).resolve().parent / "app.py").read_text(encoding="utf-8")


def space_requirements() -> str:
    """Return the Space's requirements.txt, listing the installed package's dependencies and its `space` extra.

    The `space` extra brings py3langid, for the language warning; the other extras are left out. Gradio itself comes
    with the Space's sdk_version.
    """
    try:
        requires = importlib.metadata.requires(PACKAGE) or []
    except importlib.metadata.PackageNotFoundError as error:
        raise UsageError(
            f"{PACKAGE} is not installed (pip install -e .): its dependencies are read from it"
        ) from error
    space = [r.split(";")[0].strip() for r in requires if re.search(r"extra\s*==\s*[\"']space[\"']", r)]
    lines = sorted([r for r in requires if "extra ==" not in r] + [r for r in space if not r.startswith("gradio")])
    return (
        "\n".join(["# vaswani_hf's dependencies (Gradio comes with the Space's sdk_version)", _TORCH_INDEX, *lines])
        + "\n"
    )


def render_space_readme(model_repo_id: str | None = None, title: str = "Vaswani Transformer") -> str:
    """Return the Space's README.md: YAML front matter (the Hub's Space configuration) and a short description."""
    models = f"models:\n  - {model_repo_id}\n" if model_repo_id else ""
    serves = (
        f"[{model_repo_id}](https://huggingface.co/{model_repo_id})"
        if model_repo_id
        else "the model named by $VASWANI_MODEL (default: the one recipes/multi30k-en-de-space.yaml builds)"
    )
    return (
        "---\n"
        f"title: {title}\n"
        "emoji: 🔤\n"
        "colorFrom: blue\n"
        "colorTo: purple\n"
        "sdk: gradio\n"
        f"sdk_version: {GRADIO_SDK_VERSION}\n"
        f'python_version: "{PYTHON_VERSION}"\n'
        "app_file: app.py\n"
        "license: apache-2.0\n"
        "short_description: Translate and see every attention head (Vaswani et al., 2017)\n"
        f"{models}"
        "tags:\n  - translation\n  - attention-visualization\n  - vaswani\n"
        "---\n\n"
        f"# {title}\n\n"
        f'Translate with {serves}, the original Transformer (Vaswani et al., 2017, "Attention Is All You Need"), '
        "decoded as in the paper (beam search with length penalty; both adjustable), and look at its encoder self-, "
        "decoder self- and encoder-decoder attention in the browser: the weight, query and key under the pointer, "
        "every layer and head at once, the paper's Figures 3-5 as examples, the weights as JSON or CSV. "
        "Built with vaswani_hf (`vaswani_hf.space`).\n\n"
        "## API\n\n"
        "Two endpoints, `/translate` (text, num_beams 1-12, alpha 0-2 -> the translation) and `/attention` (text, "
        "kind `encoder`/`decoder`/`cross`, 1-based layer, head `all` or 1-based, num_beams, alpha, decimals 1-8 "
        "(default 4), packed_bits 0, 8 or 16 -> the translation and the weights with their tokens: numbers rounded "
        "to `decimals` places, or with packed_bits 8 (one byte a weight, as the page gets them) or 16 base64 codes "
        "and how to read them). A bad value is answered with one sentence. Requests are queued and run one at a "
        "time; the page accepts no uploads (403).\n\n"
        f"{API_EXAMPLE}\n"
    )


def check_repo_id(repo_id: str, what: str) -> None:
    """Refuse, with a one-line UsageError, a repository id that is not valid on the Hub.

    `what` is the flag or parameter that named the id, and the message names it.
    """

    problem = repo_id_problem(repo_id)
    if problem:
        raise UsageError(f"{what} {repo_id!r} is invalid ({problem}); give 'namespace/name'")


def write_space_folder(folder: str | os.PathLike, model_repo_id: str) -> list[tuple[str, int]]:
    """Write the Space's files into `folder` (see the module docstring) and return their sorted [(path, size)]."""
    import vaswani_hf

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "app.py").write_text(SPACE_APP, encoding="utf-8")
    (folder / "README.md").write_text(render_space_readme(model_repo_id), encoding="utf-8")
    (folder / "requirements.txt").write_text(space_requirements(), encoding="utf-8")
    shutil.copytree(
        Path(vaswani_hf.__file__).parent,
        folder / PACKAGE,
        symlinks=False,
        dirs_exist_ok=True,
        ignore=shutil.ignore_patterns(*_PACKAGE_IGNORE),
    )
    return sorted((p.relative_to(folder).as_posix(), p.stat().st_size) for p in folder.rglob("*") if p.is_file())


def push_space(
    model_repo_id: str,
    space_id: str,
    *,
    private: bool = False,
    token: str | None = None,
    dry_run: bool = False,
    commit_message: str = DEFAULT_SPACE_COMMIT_MESSAGE,
    out=None,
):
    """Create (if needed) the Gradio Space `space_id` and upload, in one commit, a page serving `model_repo_id`.

    Both ids are checked before any network call, and a bad one raises a UsageError. With `dry_run`, the files (path,
    size) are printed and returned without any network call. Otherwise `model_repo_id` must exist on the Hub, which is
    checked before the Space is created, because a page serving a missing model would only fail when someone opens it.
    The token is `token`, else HF_TOKEN, else the cached login, and it is never printed. Network and authentication
    failures raise a one-line RunFailure. Returns the commit's `CommitInfo`."""
    from huggingface_hub import HfApi, get_token

    out = out or sys.stdout
    check_repo_id(model_repo_id, "model repository id")
    check_repo_id(space_id, "Space id")
    with tempfile.TemporaryDirectory(prefix="vaswani_space_") as staging:
        files = write_space_folder(staging, model_repo_id)
        if dry_run:
            total = sum(size for _, size in files)
            print(
                f"dry run: would upload {len(files)} files ({_format_size(total)}) to the Gradio Space {space_id}"
                f"{' (private)' if private else ''}, serving {model_repo_id}, in one commit:",
                file=out,
            )
            for name, size in files:
                print(f"  {name}  {size} bytes", file=out)
            return files
        if token is None and get_token() is None:
            raise RunFailure("no Hugging Face token: set HF_TOKEN or run `hf auth login` (the token is never printed)")
        api = HfApi(token=token)
        with _network_failures(space_id, token):
            if not api.repo_exists(model_repo_id, repo_type="model"):
                raise UsageError(
                    f"the model repository {model_repo_id} does not exist on the Hub (or this token "
                    "cannot see it): push the model first (--model_dir), or fix --repo_id"
                )
            url = api.create_repo(space_id, repo_type="space", space_sdk="gradio", private=private, exist_ok=True)
            info = api.upload_folder(
                repo_id=space_id, repo_type="space", folder_path=staging, commit_message=commit_message
            )
    print(
        f"uploaded the Space ({len(files)} files) to {url} in commit {info.oid}; it serves {model_repo_id}", file=out
    )
    return info
