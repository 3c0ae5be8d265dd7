"""Inference Endpoints custom handler for a vaswani_hf Transformer repository (copied as `handler.py`).

Request: {"inputs": "A sentence." | ["One.", "Two."], "parameters": {"num_beams": 4, "batch_size": 16, ...}};
answer: `[{"translation_text": ...}, ...]`, one per input, as transformers' translation pipeline. Decoding follows
the repository's generation_config.json (the paper's beam 4, length penalty 0.6, maximum length input + 50, Section
6.1); `parameters` override it per request. The model code comes from the repository (`trust_remote_code=True`).
Imports only torch and transformers.
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
        batch_size = int(parameters.pop("batch_size", 16))
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
