"""A page to try a model in a browser and look at its attention: a Gradio app, run locally or as a Hugging Face Space.

    vaswani-space --model outputs/default/hub [--host 127.0.0.1] [--port 7860]
    python -m vaswani_hf.space --model org/name          (a Hub id works too)

Type a sentence, press Translate: the page shows the translation, decoded as the paper does (Section 6.1: beam
search with GNMT's length penalty; the beam size and alpha are sliders), and a heat map of the encoder self-, decoder
self- or encoder-decoder attention (Section 3.2.3) of any layer, one head or all heads, over the subword pieces,
drawn by `vaswani_hf.visualize`. Bad input (an empty box, a pasted page, text in a script the model never saw) is
answered in the page with one sentence saying what to do; the server stays up. The model comes from --model, else
the environment variable VASWANI_MODEL, else (in a Space) the `models:` entry of its README.md, else
outputs/default/hub (the bundled model of `python scripts/train.py`).
The page makes no request outside the machine: Gradio's analytics and version check are off. The address
(--host/--port, else $GRADIO_SERVER_NAME/$GRADIO_SERVER_PORT) is checked before the model is loaded: a port in use,
an unknown host or a bad variable is one line, exit status 2. The heat maps Gradio serves are written to a temporary
folder of this server, removed when it stops (or, with GRADIO_TEMP_DIR set, pruned after an hour).

Needs the `space` extra: pip install "vaswani_hf[space]" (Gradio). The testable parts: `vaswani_hf.space_logic`.
"""

from __future__ import annotations

import atexit
import errno
import logging
import os
import shutil
import socket
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from . import space_logic as logic
from .errors import UsageError, one_line
from .visualize import KIND_TITLES, KINDS

DEFAULT_MODEL = "outputs/default/hub"
MODEL_ENV = "VASWANI_MODEL"
HOST_ENV, PORT_ENV = "GRADIO_SERVER_NAME", "GRADIO_SERVER_PORT"  # Gradio's own variables, honoured as defaults
CACHE_ENV = "GRADIO_TEMP_DIR"  # where Gradio writes the files it serves (the heat maps)
DEFAULT_HOST = "127.0.0.1"
CACHE_SECONDS = 3600  # the heat maps Gradio writes to its cache folder are deleted after an hour, and at shutdown
log = logging.getLogger(__name__)

INTRO = """# The Transformer (Vaswani et al., 2017): translate, and look at the attention
Model: `{name}`. Decoding as in the paper (Section 6.1): beam search with length penalty
((5 + |Y|) / 6)<sup>α</sup>, at most input length + 50 tokens. The heat map shows one layer's attention weights
softmax(QK<sup>T</sup>/√d<sub>k</sub>) (Eq. 1): one row per query token, one column per key token."""

__all__ = ["build_demo", "launch", "listen_address", "main", "model_from_readme", "resolve_model", "DEFAULT_MODEL",
           "MODEL_ENV"]


def _gradio():
    """Gradio, imported with its analytics off (read at import: no telemetry, no version check over the network)."""
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    _port_from_environment()  # Gradio reads it at import and fails there with a traceback
    try:
        import gradio
    except ImportError as error:
        raise UsageError('the page needs Gradio: pip install "vaswani_hf[space]"') from error
    return gradio


def _message(error: BaseException) -> str:
    return f"**⚠ {one_line(error, limit=600)}**"


def on_translate(space: logic.SpaceModel, text, num_beams, length_penalty, kind, layer, head):
    """The Translate button: (translation, message, heat map image, attentions for later views)."""
    try:
        result = logic.translate_text(space, text, num_beams, length_penalty)
        image = logic.figure_image(logic.attention_figure(space, result.attentions, kind, layer, head))
    except UsageError as error:
        return "", _message(error), None, None
    except Exception as error:  # noqa: BLE001 - a bug must not take the page down; its traceback goes to the log
        log.exception("translation failed")
        return "", _message(f"The server could not translate this ({type(error).__name__}); try another text."), \
            None, None
    penalty = f", length penalty {result.length_penalty:g}" if result.num_beams > 1 else \
        " (no length penalty with beam 1)"  # greedy decoding compares no hypotheses of different lengths
    note = (f"{len(result.attentions.source_tokens)} source and {len(result.attentions.target_tokens)} target "
            f"tokens; beam size {result.num_beams}{penalty}.")
    return result.text, note, image, result.attentions


def on_view(space: logic.SpaceModel, attentions, kind, layer, head):
    """A new choice of attention kind, layer or head: (message, heat map image) from the stored weights."""
    if attentions is None:
        return "", None
    try:
        return "", logic.figure_image(logic.attention_figure(space, attentions, kind, layer, head))
    except UsageError as error:
        return _message(error), None
    except Exception as error:  # noqa: BLE001
        log.exception("drawing failed")
        return _message(f"The server could not draw this map ({type(error).__name__})."), None


def build_demo(space: logic.SpaceModel):
    """The Gradio page (gradio.Blocks) for a loaded model."""
    gr = _gradio()
    generation = space.model.generation_config
    most_layers = max(space.layers.values())
    with gr.Blocks(title="Vaswani Transformer: translation and attention", analytics_enabled=False,
                   delete_cache=(CACHE_SECONDS, CACHE_SECONDS)) as demo:
        gr.Markdown(INTRO.format(name=space.name))
        source = gr.Textbox(label="Source sentence", lines=2, elem_id="source",
                            placeholder="Type a sentence in the model's source language")
        with gr.Row():
            beams = gr.Slider(1, logic.MAX_BEAMS, step=1, value=min(generation.num_beams or 1, logic.MAX_BEAMS),
                              label="beam size", elem_id="num_beams")
            alpha = gr.Slider(*logic.LENGTH_PENALTY_RANGE, step=0.1, label="length penalty α", elem_id="alpha",
                              value=generation.length_penalty if generation.length_penalty is not None else 0.6)
        button = gr.Button("Translate", variant="primary", elem_id="translate")
        translation = gr.Textbox(label="Translation", interactive=False, elem_id="translation")
        status = gr.Markdown(elem_id="status")
        with gr.Row():
            kind = gr.Radio([(KIND_TITLES[k], k) for k in KINDS], value="cross", label="attention", elem_id="kind")
            layer = gr.Slider(1, most_layers, step=1, value=space.layers["cross"], label="layer", elem_id="layer")
            head = gr.Dropdown([logic.ALL_HEADS] + [str(h) for h in range(1, space.heads + 1)],
                               value=logic.ALL_HEADS, label="head", elem_id="head")
        image = gr.Image(label="attention heat map (rows: queries, columns: keys)", type="pil", format="png",
                         interactive=False, elem_id="attention")
        weights = gr.State(None)

        def translate_(text, num_beams, length_penalty, kind_, layer_, head_):
            return on_translate(space, text, num_beams, length_penalty, kind_, layer_, head_)

        def view(attentions, kind_, layer_, head_):
            return on_view(space, attentions, kind_, layer_, head_)

        def layers_of(kind_, layer_):
            return gr.Slider(maximum=space.layers[kind_], value=min(int(layer_), space.layers[kind_]))

        inputs = [source, beams, alpha, kind, layer, head]
        button.click(translate_, inputs, [translation, status, image, weights])
        source.submit(translate_, inputs, [translation, status, image, weights])
        kind.change(layers_of, [kind, layer], layer).then(view, [weights, kind, layer, head], [status, image])
        layer.release(view, [weights, kind, layer, head], [status, image])
        head.change(view, [weights, kind, layer, head], [status, image])
    return demo


def resolve_model(argument: str | None, default: str | None = None) -> str:
    """--model, else $VASWANI_MODEL, else `default` (a Space's README), else the bundled model folder. An empty
    --model or $VASWANI_MODEL is refused: it would silently serve another model."""
    if argument is not None:
        if not argument.strip():
            raise UsageError("--model is empty: give a model folder or a Hub id (org/name)")
        return argument
    from_environment = os.environ.get(MODEL_ENV)
    if from_environment is not None:
        if not from_environment.strip():
            raise UsageError(f"{MODEL_ENV} is set but empty: give a model folder or a Hub id, or unset it")
        return from_environment
    return default or DEFAULT_MODEL


def model_from_readme(app_file: str | os.PathLike) -> str | None:
    """The first entry of `models:` in the YAML front matter of the README.md next to `app_file` (a Space's link to
    the model it uses), or None."""
    from huggingface_hub import SpaceCard

    readme = Path(app_file).resolve().parent / "README.md"
    if not readme.is_file():
        return None
    models = SpaceCard.load(readme).data.get("models") or []
    return str(models[0]) if models else None


def _port_from_environment() -> int | None:
    """$GRADIO_SERVER_PORT as a port number (None when unset), or a UsageError naming it."""
    text = os.environ.get(PORT_ENV)
    if text is None:
        return None
    try:
        port = int(text.strip())
    except ValueError:
        port = 0
    if not 1 <= port <= 65535:
        raise UsageError(f"{PORT_ENV}={text!r} is not a port number: give a whole number from 1 to 65535, or unset it")
    return port


def listen_address(host: str | None = None, port: int | None = None) -> tuple[str, int | None]:
    """(host, port) the page will listen on: --host, else $GRADIO_SERVER_NAME, else 127.0.0.1; --port, else
    $GRADIO_SERVER_PORT, else None (Gradio takes the first free port from 7860). Checked by binding a test socket,
    before the model is loaded (which takes a while): an unknown host, an address of another machine, a port in use
    or reserved is a UsageError naming the flag or variable it came from."""
    host_from = "--host"
    if host is None:
        host, host_from = os.environ.get(HOST_ENV), HOST_ENV
    if host is None:
        host, host_from = DEFAULT_HOST, "the default host"
    port_from = "--port"
    if port is None:
        port, port_from = _port_from_environment(), PORT_ENV
    if not host.strip():
        raise UsageError(f"{host_from} is empty: give an address to listen on, e.g. 127.0.0.1 (this machine only) "
                         "or 0.0.0.0 (every network interface)")
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host  # [::1] as a browser writes it
    try:
        family, kind, protocol, _, address = socket.getaddrinfo(bare, port or 0, type=socket.SOCK_STREAM)[0]
    except (socket.gaierror, UnicodeError) as error:
        raise UsageError(f"{host_from} {host!r} is not an address or a host name this machine knows "
                         f"({getattr(error, 'strerror', None) or error}); give e.g. 127.0.0.1 or 0.0.0.0") from error
    with socket.socket(family, kind, protocol) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server will: a port in TIME_WAIT is free
        try:
            probe.bind(address)
        except OSError as error:
            raise UsageError(_bind_refusal(error, host, host_from, port, port_from)) from error
    return host, port


def _bind_refusal(error: OSError, host: str, host_from: str, port: int | None, port_from: str) -> str:
    named_port = f"{port_from} {port}" if port_from.startswith("--") else f"{port_from}={port}"
    if error.errno == errno.EADDRINUSE:
        return f"{named_port}: the port is in use on {host} (another server?); choose another port or stop that one"
    if error.errno == errno.EACCES:
        return f"{named_port}: this user may not listen on ports below 1024; choose a port from 1024 to 65535"
    if error.errno == errno.EADDRNOTAVAIL:
        return f"{host_from} {host!r} is not an address of this machine; give e.g. 127.0.0.1 or 0.0.0.0"
    return f"cannot listen on {host} port {port or 'any'} ({error.strerror or error}); choose another --host or --port"


def launch(model: str | None = None, host: str | None = None, port: int | None = None, *,
           default_model: str | None = None, **launch_kwargs):
    """Check the address (`listen_address`), load the model, build the page and serve it; blocks until stopped
    unless `prevent_thread_lock=True`."""
    from .io import check_model_folder

    name = resolve_model(model, default_model)
    host, port = listen_address(host, port)  # before the model: loading it takes a while
    check_model_folder(name)  # cheap: a missing or broken folder is named before Gradio is even imported
    cache = _own_cache_folder()
    try:
        _gradio()
        space = logic.load_space_model(name)
        demo = build_demo(space)
        demo.queue(default_concurrency_limit=1)  # one decoding at a time: the model is not shared between requests
        try:
            demo.launch(server_name=host, server_port=port, show_error=False, footer_links=[], **launch_kwargs)
        except OSError as error:  # e.g. the port taken since listen_address checked it
            raise UsageError(f"could not start the page's server on {host} port {port or 'from 7860'} "
                             f"({str(error).split('. ')[0]}); choose another --port or --host") from error
    finally:
        if cache is not None and not launch_kwargs.get("prevent_thread_lock"):
            shutil.rmtree(cache, ignore_errors=True)  # the server has stopped (else: at exit, see _own_cache_folder)
    return demo


def _own_cache_folder() -> str | None:
    """A temporary folder of this server for the heat maps Gradio writes (its GRADIO_TEMP_DIR), removed when the
    server stops or the process exits; None when GRADIO_TEMP_DIR is set (the user's folder: `CACHE_SECONDS` prunes
    it). Gradio's own default, a shared /tmp/gradio, would keep every map of every run forever."""
    if os.environ.get(CACHE_ENV):
        return None
    folder = tempfile.mkdtemp(prefix="vaswani_space_")
    os.environ[CACHE_ENV] = folder
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def _main(argv: Sequence[str], default_model: str | None = None) -> int:
    from .cli.contract import ArgumentParser
    from .constraints import number

    parser = ArgumentParser(prog="vaswani-space", description=__doc__)
    parser.add_argument("--model", default=None,
                        help=f"model folder or Hub id (default: ${MODEL_ENV}, else a Space README's models:, "
                             f"else {DEFAULT_MODEL})")
    parser.add_argument("--host", default=None,
                        help="address to listen on (default: $GRADIO_SERVER_NAME, else 127.0.0.1; 0.0.0.0: all)")
    parser.add_argument("--port", type=number(int, min=1, max=65535), default=None,
                        help="port (default: $GRADIO_SERVER_PORT or 7860)")
    args = parser.parse_args(argv)
    launch(args.model, args.host, args.port, default_model=default_model)
    return 0


def main(argv: Sequence[str] | None = None, default_model: str | None = None) -> int:
    """The command line (`vaswani-space`, `python -m vaswani_hf.space`, a Space's app.py with the model of its
    README as `default_model`); refusals are one line with exit status 2 (vaswani_hf.cli.contract)."""
    from .cli.contract import run_cli

    return run_cli(lambda args: _main(args, default_model), argv, prog="vaswani-space")


if __name__ == "__main__":
    sys.exit(main())
