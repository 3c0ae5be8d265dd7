"""Stage 7, CTranslate2: our export (`vaswani_hf.export.to_ctranslate2`) decoding beam 4 beside ours, on the device.

Not carried to the GPU machine today: the ctranslate2 4.8.5 wheel for Python 3.12 is 40.8 MiB alone (the whole wheel
set must stay under 40 MiB) and is built against CUDA 12 (it loads libcublas.so.12; the image has CUDA 13), so on
the GPU this stage is skipped with that reason. Where ctranslate2 is installed (the smoke run on a CPU) it exports a
random model, decodes the same sources with both, forced to the same length, and reports sentences/s and how many
outputs are identical.
"""

from __future__ import annotations

import time

from common import Context, Recorder, SkipStage

NOT_CARRIED = (
    "ctranslate2 is not installed here: its Python 3.12 wheel (4.8.5) is 40.8 MiB, over the 40 MiB the "
    "whole wheel set may take, and is built for CUDA 12 (libcublas.so.12) while the image has CUDA 13"
)
GPU = dict(d_model=512, d_ff=2048, num_heads=8, layers=6, sentences=512, batch=64, length=32, vocab=8000)
SMOKE = dict(d_model=32, d_ff=64, num_heads=2, layers=1, sentences=8, batch=4, length=6, vocab=300)


def check_available(ctx: Context):
    try:
        import ctranslate2
    except ImportError:
        raise SkipStage(NOT_CARRIED) from None
    if ctx.on_gpu and ctranslate2.get_cuda_device_count() == 0:
        raise SkipStage(f"ctranslate2 {ctranslate2.__version__} is installed but sees no CUDA device")
    return ctranslate2


def build(ctx: Context, sizes: dict):
    import torch
    from stage_train_script import GPU as TRAIN_GPU
    from stage_train_script import SMOKE as TRAIN_SMOKE
    from stage_train_script import corpus

    from vaswani_hf import VaswaniConfig, VaswaniForConditionalGeneration
    from vaswani_hf.tokenization import train_bpe_tokenizer

    data = corpus(ctx, (TRAIN_SMOKE if ctx.smoke else TRAIN_GPU)["pairs"])
    tokenizer = train_bpe_tokenizer(
        [str(data / "train.en"), str(data / "train.de")], vocab_size=sizes["vocab"], show_progress=False
    )
    torch.manual_seed(0)
    config = VaswaniConfig(
        vocab_size=len(tokenizer),
        d_model=sizes["d_model"],
        d_ff=sizes["d_ff"],
        num_heads=sizes["num_heads"],
        num_encoder_layers=sizes["layers"],
        num_decoder_layers=sizes["layers"],
    )
    sources = (data / "test.en").read_text(encoding="utf-8").splitlines()[: sizes["sentences"]]
    return VaswaniForConditionalGeneration(config).eval(), tokenizer, sources


def run(ctx: Context, rec: Recorder) -> None:
    import torch
    from common import synchronize

    from vaswani_hf.export import to_ctranslate2
    from vaswani_hf.translation.inference import _pad

    ctranslate2 = check_available(ctx)
    sizes = SMOKE if ctx.smoke else GPU
    model, tokenizer, sources = build(ctx, sizes)
    folder = to_ctranslate2(model, ctx.work / "ct2_model", tokenizer=tokenizer, force=True)
    compute = "float16" if ctx.on_gpu else "float32"
    rec.set("setup", {**sizes, "compute_type": compute, "ctranslate2": ctranslate2.__version__})
    encoded = tokenizer(sources)["input_ids"]
    n, length, batch = len(sources), sizes["length"], sizes["batch"]
    model = model.to(ctx.device)
    options = dict(
        num_beams=4,
        length_penalty=0.6,
        length_penalty_type="hf",
        min_new_tokens=length,
        max_new_tokens=length,
        max_length_b=None,
    )
    start = time.perf_counter()
    ours = []
    with torch.inference_mode():
        for i in range(0, n, batch):
            ids, mask = _pad(encoded[i : i + batch], tokenizer.pad_token_id, torch.device(ctx.device))
            ours += [row[1:] for row in model.generate(input_ids=ids, attention_mask=mask, **options).tolist()]
    synchronize(ctx.device)
    ours_s = time.perf_counter() - start
    translator = ctranslate2.Translator(str(folder), device="cuda" if ctx.on_gpu else "cpu", compute_type=compute)
    tokens = [tokenizer.convert_ids_to_tokens(ids) for ids in encoded]
    start = time.perf_counter()
    results = translator.translate_batch(
        tokens,
        max_batch_size=batch,
        beam_size=4,
        length_penalty=0.6,
        min_decoding_length=length,
        max_decoding_length=length,
        max_input_length=0,
    )
    ct2_s = time.perf_counter() - start
    theirs = [tokenizer.convert_tokens_to_ids(r.hypotheses[0]) for r in results]
    same = sum(a[: len(b)] == b for a, b in zip(ours, theirs))
    rec.set(
        "result",
        {
            "ours_sentences_per_s": round(n / ours_s, 1),
            "ct2_sentences_per_s": round(n / ct2_s, 1),
            "ratio_ct2_over_ours": round(ours_s / ct2_s, 3),
            "identical_outputs": f"{same}/{n}",
        },
    )


def markdown(result: dict) -> list[str]:
    if "result" not in result:
        return []
    s, r = result["setup"], result["result"]
    return [
        f"- random model d_model {s['d_model']}, {s['layers']} + {s['layers']} layers, {s['sentences']} sentences, "
        f"batch {s['batch']}, beam 4 forced to {s['length']} tokens, CTranslate2 {s['ctranslate2']} "
        f"{s['compute_type']}: ours {r['ours_sentences_per_s']} sent/s, CTranslate2 {r['ct2_sentences_per_s']} "
        f"sent/s (x{r['ratio_ct2_over_ours']}), identical outputs {r['identical_outputs']}"
    ]
