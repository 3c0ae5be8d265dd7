"""Serve a vaswani_hf Transformer repository on Inference Endpoints as a custom handler.

`vaswani_hf.hub.add_handler` copies this file into the model folder as `handler.py`. Inference Endpoints instantiates
`EndpointHandler(path)` with the repository's local path and calls it with the request's JSON body:

    {"inputs": "A sentence." | ["Sentence one.", "Sentence two."], "parameters": {"num_beams": 4, ...}}

It returns `[{"translation_text": ...}, ...]`, one entry per input, which is the output format of transformers'
translation pipeline. Decoding follows the repository's `generation_config.json`, the paper's decoding (beam 4, GNMT
length penalty 0.6, maximum length input + 50; Section 6.1), and `parameters` override it per request with any
`generate()` keyword. The one parameter that is not a `generate()` keyword is `batch_size` (16 by default), the
number of sentences translated at once.

The model code is loaded from the repository (`trust_remote_code=True`), because the endpoint image need not have
vaswani_hf installed; that is also why this file imports only torch and transformers.
"""

from typing import Any

import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer


class EndpointHandler:
    def __init__(self, path: str = ""):
        self.tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=True)
        self.model = AutoModelForSeq2SeqLM.from_pretrained(path, trust_remote_code=True)
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.model.to(self.device).eval()

    def __call__(self, data: dict[str, Any]) -> list[dict[str, str]]:
        inputs = data.get("inputs", data) if isinstance(data, dict) else data
        parameters = dict(data.get("parameters") or {}) if isinstance(data, dict) else {}
        if isinstance(inputs, str):
            texts = [inputs]
        elif isinstance(inputs, list) and all(isinstance(text, str) for text in inputs):
            texts = inputs
        else:
            raise ValueError('expected {"inputs": str | list[str], "parameters": {...}}')
        batch_size = int(parameters.pop("batch_size", 16))  # The handler's own parameter, not a generate() keyword.
        outputs = []
        with torch.inference_mode():
            for start in range(0, len(texts), batch_size):
                chunk = [text.strip() for text in texts[start : start + batch_size]]
                encoded = self.tokenizer(chunk, return_tensors="pt", padding=True)
                encoded = {key: encoded[key].to(self.device) for key in ("input_ids", "attention_mask")}
                generated = self.model.generate(**encoded, **parameters)
                decoded = self.tokenizer.batch_decode(generated, skip_special_tokens=True)
                outputs.extend({"translation_text": text.strip()} for text in decoded)
        return outputs
