"""Serve a page to try a model in a browser and look at its attention, as a Gradio app, locally or as a Space.

    vaswani-space --model outputs/default/hub [--host 127.0.0.1] [--port 7860]
    python -m vaswani_hf.space --model org/name          (a Hub id works too)

The page says what the model is, from its card and config, never where it is stored. It offers examples, among them
the paper's attention figures 3-5, and marks those whose text lies outside the model's domain. It translates with the
paper's decoding (Section 6.1), where beam size and alpha are sliders whose ranges lie within the declared settings'
ranges, and says how long it took. It warns when the text looks like another language than the model's source, and it
draws every attention weight (Section 3.2.3) in the browser (view.js, beside this file). What a translation sends the page is bounded by design
(vaswani_hf.space.payload sends one byte a weight, the first view's blocks first, at most about 1.5 MB). A view that
needs weights not yet sent asks the viewer's server function once; every other change of view is drawn in the browser.
The API, for gradio_client, has two endpoints, `/translate` and `/attention`. A bad value is answered with one
sentence (gr.Error), a text in another language with a warning (gr.Warning, and /attention's "warning"). No upload
is accepted (`Guard`).

The model served is --model, else $VASWANI_MODEL, else (in a Space) its README's `models:`, else the first folder of
`DEFAULT_MODELS` that exists: the Space's model (recipes/multi30k-en-de-space.yaml), then the demo model of
`python scripts/train.py`. No request leaves the machine (Gradio's analytics are off). The address is checked before
the model is loaded, which takes a while, and a bad one is refused in one line with exit status 2.
The page needs the `space` extra: pip install "vaswani_hf[space]". Its testable parts are in `vaswani_hf.space.logic`.
"""

from __future__ import annotations

import errno
import functools
import json
import logging
import os
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..cli.contract import ArgumentParser, run_cli
from ..configuration_vaswani import SettingError
from ..errors import UsageError, one_line
from ..io import check_model_folder
from ..precision import DTYPE
from ..settings import flag, settings_of
from . import logic
from .payload import answer_blocks

# Where the recipes write their models: first the Space's (a model worth trying, `SPACE_RECIPE`), then the demo model.
SPACE_RECIPE = "multi30k-en-de-space"
DEFAULT_MODELS = (f"outputs/{SPACE_RECIPE}/hub", "outputs/default/hub")
MODEL_ENV = "VASWANI_MODEL"
HOST_ENV, PORT_ENV = "GRADIO_SERVER_NAME", "GRADIO_SERVER_PORT"  # Gradio's own variables, honoured as defaults.
DEFAULT_HOST = "127.0.0.1"
QUEUE_CONCURRENCY = 1  # One decoding at a time, because the model is not shared between requests.
VIEWER = Path(__file__).resolve().parent  # view.css and view.js, the page's drawing code
log = logging.getLogger(__name__)

MARKER_NOTE = (
    f"Token labels: **{logic.WORD_START}** marks a token that starts a word; a label without it continues "
    "the word before it (the model reads subword pieces, Section 5.1). `<start>` is the decoder's first "
    "input, `</s>` the end of the sentence."
)


def _gradio():
    """Import Gradio with its analytics off and return it, so that no telemetry or version check uses the network."""
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    _port_from_environment()  # Gradio reads it at import and would fail there with a traceback.
    try:
        import gradio
    except ImportError as error:
        raise UsageError('the page needs Gradio: pip install "vaswani_hf[space]"') from error
    return gradio


def intro(facts: logic.ModelFacts) -> str:
    """Return the page's heading, which says what the model is, from its card and config."""
    pair = (
        f"{logic.language_name(facts.source_lang)} → {logic.language_name(facts.target_lang)}"
        if facts.source_lang
        else "language pair not stated in its card"
    )
    parts = [
        pair,
        f"{facts.parameters / 1e6:.1f}M parameters" if facts.parameters >= 1e5 else f"{facts.parameters:,} parameters",
    ]
    parts.append(f"BLEU {facts.bleu}" if facts.bleu else "no BLEU in its card")
    if facts.card_url or facts.card_text:
        parts.append(f"[model card]({facts.card_url})" if facts.card_url else "its model card below")
    return (
        f"# {facts.title}: the Transformer (Vaswani et al., 2017)\n**{' · '.join(parts)}**. Decoding as in the "
        "paper (Section 6.1): beam search with length penalty ((5 + |Y|) / 6)<sup>α</sup>, at most input length "
        "+ 50 tokens. The attention maps show softmax(QK<sup>T</sup>/√d<sub>k</sub>) (Eq. 1): one row per query "
        "token, one column per key token."
    )


def _answer(call, what: str):
    """Return `call()`, turning a refusal into one sentence (gr.Error) and a bug into one line; log the traceback."""
    gr = _gradio()
    try:
        return call()
    except (UsageError, SettingError) as error:
        raise gr.Error(one_line(error, limit=600), print_exception=False) from None
    except Exception as error:  # noqa: BLE001 - a bug must not take the page down.
        log.exception("%s failed", what)
        raise gr.Error(
            f"The server could not {what} this ({type(error).__name__}); try another text.", print_exception=False
        ) from None


def on_translate(space: logic.SpaceModel, text, num_beams, length_penalty, view=None):
    """Return what Enter, the Translate button or an example shows: the translation, status line and viewer's JSON.

    A refusal is shown as the status, with an empty translation."""
    started = time.perf_counter()
    try:
        result = _answer(lambda: logic.translate_text(space, text, num_beams, length_penalty), "translate")
    except Exception as error:  # noqa: BLE001 - _answer's gr.Error is shown as the status.
        # gr.Error's str() is the repr of its message, quotes included: the page shows the sentence itself.
        return "", f"**⚠ {getattr(error, 'message', error)}**", ""
    penalty = (
        f", length penalty {result.length_penalty:g}" if result.num_beams > 1 else " (no length penalty with beam 1)"
    )  # Greedy decoding compares no hypotheses of different lengths.
    try:
        chosen = json.loads(view) if view else None  # An example's view, from the page's hidden box.
    except ValueError:
        chosen = None
    payload = logic.attention_payload(space, result.attentions, chosen if isinstance(chosen, dict) else None)
    seconds = time.perf_counter() - started  # Translation, attention and packing; not the network.
    status = (
        f"{len(result.attentions.source_tokens)} source and {len(result.attentions.target_tokens)} target "
        f"tokens; beam size {result.num_beams}{penalty}; computed in {seconds:.2f} s."
    )
    if result.warning:
        status = f"**⚠ {result.warning}** {status}"
    return result.text, status, json.dumps(payload, separators=(",", ":"))


def api_functions(space: logic.SpaceModel):
    """Return the public endpoints, /translate and /attention, typed for gradio_client."""
    gr, settings, api = _gradio(), logic.PAGE_SETTINGS, logic.API_SETTINGS
    beams_default, alpha_default = settings["num_beams"].default, settings["length_penalty"].default

    def translated(text, num_beams, alpha) -> logic.Translation:
        result = logic.translate_text(space, text, num_beams, alpha)
        # gradio_client gets the warning as a "log" status update of the job (warnings.warn outside a request).
        if result.warning:
            gr.Warning(result.warning)
        return result

    def translate(text: str, num_beams: int = beams_default, alpha: float = alpha_default) -> str:
        """Translate one sentence with the paper's decoding (Section 6.1): beam search with num_beams from 1 to 12
        (1 is greedy) and GNMT's length penalty with alpha from 0 to 2. Returns the translation as one line."""
        return _answer(lambda: translated(text, num_beams, alpha).text, "translate")

    def attention(
        text: str,
        kind: str = "encoder",
        layer: int = 1,
        head: str = logic.ALL_HEADS,
        num_beams: int = beams_default,
        alpha: float = alpha_default,
        decimals: int = api["decimals"].default,
        packed_bits: int = api["packed_bits"].default,
    ) -> dict:
        """Translate one sentence and return one view of its attention (Section 3.2.3). kind is encoder, decoder or
        cross; layer is 1-based; head is 'all' or 1-based. The answer is {translation, warning, kind, layer, head,
        queries, keys, shape, weights}, with the weights rounded to `decimals` places (1-8); with packed_bits 8 or 16
        they come instead as base64 codes in `packed`, read as `code` says."""

        def call():
            result = translated(text, num_beams, alpha)
            return {
                "translation": result.text,
                "warning": result.warning,
                **logic.attention_numbers(space, result.attentions, kind, layer, head, decimals, packed_bits),
            }

        return _answer(call, "compute the attention of")

    return translate, attention


def example_buttons(facts: logic.ModelFacts) -> list:
    """Return [(button, example)], one button per example, with its whole label (gr.Examples cuts one at 60
    characters), marked when its text lies outside the model's domain."""
    gr = _gradio()
    with gr.Column(elem_id="examples"):
        gr.Markdown("Examples (each opens the view it names):", elem_id="examples-title")
        with gr.Row():
            return [
                (gr.Button(logic.example_label(e, facts), size="sm", elem_classes="example"), e)
                for e in logic.EXAMPLES
            ]


def build_demo(space: logic.SpaceModel):
    """Build and return the Gradio page (gradio.Blocks) for a loaded model."""
    gr = _gradio()
    facts, settings = space.facts, logic.PAGE_SETTINGS
    generation = space.model.generation_config
    beams, alpha = settings["num_beams"], settings["length_penalty"]
    with gr.Blocks(
        title=f"{facts.title}: translation and attention", analytics_enabled=False, delete_cache=(3600, 3600)
    ) as demo:
        gr.Markdown(intro(facts), elem_id="intro")
        source = gr.Textbox(
            label=f"Source sentence ({logic.language_name(facts.source_lang)}); Enter translates",
            lines=1,
            max_lines=4,
            elem_id="source",
            submit_btn="Translate",
            placeholder="Type a sentence in the model's source language and press Enter",
        )
        view = gr.Textbox(visible=False)  # The view an example opens, as JSON, for the viewer.
        examples = example_buttons(facts)
        with gr.Row():
            num_beams = gr.Slider(
                beams.min,
                beams.max,
                step=1,
                label=beams.help,
                value=min(max(generation.num_beams or 1, 1), beams.max),
                elem_id="num_beams",
            )
            length_penalty = gr.Slider(
                alpha.min,
                alpha.max,
                step=0.1,
                label=f"α, {alpha.help}",
                value=generation.length_penalty if generation.length_penalty is not None else alpha.default,
                elem_id="alpha",
            )
        translation = gr.Textbox(label="Translation", interactive=False, elem_id="translation")
        status = gr.Markdown(elem_id="status")
        gr.Markdown(MARKER_NOTE, elem_id="marker-note")

        def attention_blocks(request):  # The viewer's requests for weights it was not sent (see space.payload).
            return answer_blocks(space.cache, request)

        viewer = gr.HTML(
            "",
            html_template='<div class="vz"></div>',
            elem_id="viewer",
            css_template=(VIEWER / "view.css").read_text(encoding="utf-8"),
            js_on_load=(VIEWER / "view.js").read_text(encoding="utf-8"),
            server_functions=[attention_blocks],
        )

        def translate_(text, beams_, alpha_, view_):
            return on_translate(space, text, beams_, alpha_, view_)

        outputs = [translation, status, viewer]
        inputs = [source, num_beams, length_penalty, view]
        for button, example in examples:  # The example's text and view are set in the browser, then translated.
            chosen = json.dumps([example.text, json.dumps(example.view) if example.view else ""])
            button.click(None, None, [source, view], js=f"() => {chosen}", api_visibility="private").then(
                translate_, inputs, outputs, api_visibility="private"
            )
        source.submit(translate_, inputs, outputs, api_visibility="private")
        source.input(None, None, view, js="() => ''")  # Typing forgets the example's view, in the browser.
        with gr.Accordion("Use it from Python (gradio_client)", open=False):
            gr.Markdown(
                f"{logic.API_EXAMPLE}\nRequests wait in one queue and run {QUEUE_CONCURRENCY} at a time; "
                "a bad value is answered with one sentence."
            )
        if facts.card_text:  # A model folder's card is shown in the page, since there is no address to link to.
            with gr.Accordion("Model card", open=False, elem_id="card"):
                gr.Markdown(facts.card_text)
        for fn in api_functions(space):
            gr.api(fn, api_name=fn.__name__)
    return demo


class Guard:
    """Refuse, in one sentence where Gradio would print a traceback, requests the page never makes.

    This ASGI middleware runs before Gradio's routes (`Middleware(Guard, blocks=demo)` in launch's app_kwargs). It
    refuses every upload (the page has no file input), and a queued call (.../queue/join) of a function the server
    lacks (including one that runs in the browser only) or with the wrong number of values."""

    def __init__(self, app, blocks):
        self.app, self.blocks = app, blocks

    async def __call__(self, scope, receive, send):
        from starlette.responses import JSONResponse  # Gradio's dependency, from the optional `space` extra.

        path = scope["path"].rstrip("/") if scope["type"] == "http" and scope["method"] == "POST" else ""
        if path.endswith(("/upload", "/process_recording")):  # Gradio's two routes that store a sent file.
            return await JSONResponse({"detail": "This page accepts no uploads."}, 403)(scope, receive, send)
        if path.endswith("/queue/join"):
            body, message = b"", {"more_body": True}
            while message.get("more_body"):
                message = await receive()
                body += message.get("body", b"")
            if problem := self.problem(body):
                return await JSONResponse({"detail": problem}, 422)(scope, receive, send)
            receive = functools.partial(_replay, [{"type": "http.request", "body": body}], receive)
        await self.app(scope, receive, send)

    def problem(self, body: bytes) -> str | None:
        """Return what is wrong with a /queue/join request in one sentence, or None to let Gradio handle it.

        A body that is not a JSON object is also left to Gradio, which answers it itself.
        """
        try:
            request = json.loads(body)
            index, data = request.get("fn_index"), request.get("data")
        except (ValueError, AttributeError):
            return None
        fn = self.blocks.fns.get(index) if isinstance(index, int) else None
        if fn is None or fn.fn is None:  # No function, or one that runs in the browser only (an example's choice).
            return f"This page has no function {repr(index)[:40]} on its server: its API is /translate and /attention."
        if not isinstance(data, list) or len(data) != len(fn.inputs):
            return (
                f"The function {fn.api_name or fn.name} needs {len(fn.inputs)} values, got "
                f"{len(data) if isinstance(data, list) else 'none'}."
            )
        return None


async def _replay(messages: list, receive):  # Gives the request's body, read once, then the connection's messages.
    return messages.pop() if messages else await receive()


def resolve_model(argument: str | None, default: str | None = None) -> str:
    """Return the model to serve: --model, else $VASWANI_MODEL, else `default` (a Space's README), else a default.

    The default is the first of `DEFAULT_MODELS` that exists, or the Space's model when none does, so that the refusal
    says how to build it. An empty name raises a UsageError, because it would silently serve another model."""
    if argument is not None:
        if not argument.strip():
            raise UsageError("--model is empty: give a model folder or a Hub id (org/name)")
        return argument
    from_environment = os.environ.get(MODEL_ENV)
    if from_environment is not None:
        if not from_environment.strip():
            raise UsageError(f"{MODEL_ENV} is set but empty: give a model folder or a Hub id, or unset it")
        return from_environment
    return default or next((m for m in DEFAULT_MODELS if Path(m).is_dir()), DEFAULT_MODELS[0])


def model_from_readme(app_file: str | os.PathLike) -> str | None:
    """Return the first `models:` entry of the README.md next to `app_file` (a Space's link to its model), or None."""
    from huggingface_hub import SpaceCard

    readme = Path(app_file).resolve().parent / "README.md"
    if not readme.is_file():
        return None
    models = SpaceCard.load(readme).data.get("models") or []
    return str(models[0]) if models else None


@dataclass
class ServerSettings:
    """Declare where the page listens: --port, or $GRADIO_SERVER_PORT."""

    port: int | None = field(
        default=None,
        metadata={"help": "port (default: $GRADIO_SERVER_PORT or 7860)", "min": 1, "max": 65535},
    )


SERVER_SETTINGS = settings_of(ServerSettings)


def _port_from_environment() -> int | None:
    """Return $GRADIO_SERVER_PORT as a port number, or None when unset; a bad value raises a UsageError naming it."""
    text = os.environ.get(PORT_ENV)
    if text is None:
        return None
    port = SERVER_SETTINGS["port"]
    try:
        return port.check(port.read(text, PORT_ENV), PORT_ENV)
    except SettingError:
        raise UsageError(
            f"{PORT_ENV}={text!r} is not a port number: give an integer {port.limits()}, or unset it"
        ) from None


def listen_address(host: str | None = None, port: int | None = None) -> tuple[str, int | None]:
    """Return the (host, port) the page will listen on, checked by binding a test socket before the model is loaded.

    The host is --host, else $GRADIO_SERVER_NAME, else 127.0.0.1. The port is --port, else $GRADIO_SERVER_PORT, else
    None, and Gradio then takes the first free port from 7860. The model takes a while to load, so an unknown host, an
    address of another machine, or a port in use or reserved is first a UsageError naming its flag or variable."""

    host_from, port_from = "--host", "--port"
    if host is None:
        host, host_from = (
            (os.environ[HOST_ENV], HOST_ENV) if HOST_ENV in os.environ else (DEFAULT_HOST, "the default host")
        )
    if port is None:
        port, port_from = _port_from_environment(), PORT_ENV
    if not host.strip():
        raise UsageError(
            f"{host_from} is empty: give an address to listen on, e.g. 127.0.0.1 (this machine only) "
            "or 0.0.0.0 (every network interface)"
        )
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host  # [::1], as a browser writes it.
    try:
        family, kind, protocol, _, address = socket.getaddrinfo(bare, port or 0, type=socket.SOCK_STREAM)[0]
    except (socket.gaierror, UnicodeError) as error:
        raise UsageError(
            f"{host_from} {host!r} is not an address or a host name this machine knows "
            f"({getattr(error, 'strerror', None) or error}); give e.g. 127.0.0.1 or 0.0.0.0"
        ) from error
    with socket.socket(family, kind, protocol) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # As the server will: a port in TIME_WAIT is free.
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


def launch(
    model: str | None = None,
    host: str | None = None,
    port: int | None = None,
    *,
    default_model: str | None = None,
    dtype: str | None = None,
    **launch_kwargs,
):
    """Check the address, load the model in the precision `dtype` (`vaswani_hf.precision.DTYPE`, default fp32), build
    the page, serve it and return it; the call blocks unless `prevent_thread_lock=True` is given."""
    name = resolve_model(model, default_model)
    host, port = listen_address(host, port)  # Checked before the model, because loading it takes a while.
    if name in DEFAULT_MODELS and not Path(name).exists():
        raise UsageError(
            f"no model to serve: {name} not found; build the Space's model with python scripts/train.py --recipe "
            f"{SPACE_RECIPE} (about 90 minutes on one CPU core), or give --model FOLDER or a Hub id"
        )
    check_model_folder(name)  # Cheap, so a missing or broken folder is named before Gradio is imported.
    _gradio()
    demo = build_demo(logic.load_space_model(name, dtype=dtype))
    demo.queue(default_concurrency_limit=QUEUE_CONCURRENCY)
    from starlette.middleware import Middleware  # Gradio's dependency, already imported with it.

    try:
        demo.launch(
            server_name=host,
            server_port=port,
            show_error=False,
            footer_links=["api"],
            app_kwargs={"middleware": [Middleware(Guard, blocks=demo)]},
            **launch_kwargs,
        )
    except OSError as error:  # For example, the port was taken after listen_address checked it.
        raise UsageError(
            f"could not start the page's server on {host} port {port or 'from 7860'} "
            f"({str(error).split('. ')[0]}); choose another --port or --host"
        ) from error
    return demo


def _main(argv: Sequence[str], default_model: str | None = None) -> int:
    parser = ArgumentParser(prog="vaswani-space", description=__doc__)
    parser.add_argument(
        "--model",
        default=None,
        help=f"model folder or Hub id (default: ${MODEL_ENV}, else a Space README's models:, else the first of "
        f"{', '.join(DEFAULT_MODELS)} that exists)",
    )
    parser.add_argument(
        "--host",
        default=None,
        help="address to listen on (default: $GRADIO_SERVER_NAME, else 127.0.0.1; 0.0.0.0: all)",
    )
    parser.add_argument("--port", **flag(SERVER_SETTINGS["port"]))
    parser.add_argument("--dtype", **flag(DTYPE, default=None))
    args = parser.parse_args(argv)
    launch(args.model, args.host, args.port, default_model=default_model, dtype=args.dtype)
    return 0


def main(argv: Sequence[str] | None = None, default_model: str | None = None) -> int:
    """Run the command line of `vaswani-space`, `python -m vaswani_hf.space` or a Space's app.py; return its status.

    A Space's app.py passes its README's model as `default_model`. Refusals are one line with exit status 2."""
    return run_cli(lambda args: _main(args, default_model), argv, prog="vaswani-space")
