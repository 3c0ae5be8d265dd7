"""Check the headers of the binary weight files by hand before a library reads them: a safetensors file's header
against the bytes of the file, and CTranslate2's model folders (model.bin's variable table and the JSON files).

The libraries read these files in native code and report a broken one as a panic or an abort, so a truncated or
corrupt file is refused here in one line naming the file (`UsageError`). The headers' JSON parts are checked by the
declared shapes of `io.files`.
"""

from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UsageError
from ..settings import settings_of
from .files import (
    COUNT,
    CT2_CONFIG,
    CT2_METADATA,
    CT2_VOCABULARY,
    STR,
    FileShape,
    ListOf,
    Nullable,
    Obj,
    check_library_input,
    check_shape,
    check_tokenizer_file,
    read_json,
)

# safetensors files: the header is checked against the bytes.
# These are the bits per element of the safetensors dtypes, from the format's description and
# `safetensors/src/tensor.rs`.
SAFETENSORS_DTYPE_BITS = {
    "BOOL": 8,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "I64": 64,
    "U64": 64,
    "F64": 64,
    "C64": 64,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
}
MAX_SAFETENSORS_HEADER = 100_000_000  # the format's own limit


@dataclass
class TensorHeaderFields:
    """Declare the field of a safetensors tensor entry that has choices; its other fields are counts."""

    dtype: str = field(default="F32", metadata={"help": "the element type", "choices": tuple(SAFETENSORS_DTYPE_BITS)})


_HEADER = settings_of(TensorHeaderFields)
_TENSOR = Obj(
    required={
        "dtype": _HEADER["dtype"],
        "shape": ListOf(COUNT),
        "data_offsets": ListOf(COUNT, length=2),
    },
    extra=False,
)
SAFETENSORS_HEADER = FileShape(
    "safetensors header",
    Obj(optional={"__metadata__": Nullable(Obj(extra=STR))}, extra=_TENSOR),
    "the weights are corrupt: copy or save the model again",
)


def check_safetensors(path: str | os.PathLike) -> dict:
    """Check the header of a safetensors file by the format's rules, without reading the data, and return it.

    The file starts with 8 bytes of header length, then a JSON object of tensors {dtype, shape, data_offsets}. Each
    tensor's bytes must be its elements times its dtype's size, and the byte ranges must tile the data exactly up to
    the end of the file (no gap, no overlap, nothing missing). So a truncated download is named here, not deep inside
    a loader. A problem raises a UsageError naming the file and the tensor."""
    p = Path(path)
    size = p.stat().st_size
    broken = f"{p}: truncated or corrupt safetensors weights"
    advice = "copy or save the model again"
    with open(p, "rb") as handle:
        head = handle.read(8)
        if len(head) < 8:
            raise UsageError(f"{broken} ({size} bytes); {advice}")
        length = int.from_bytes(head, "little")
        if length <= 0 or length > MAX_SAFETENSORS_HEADER or 8 + length > size:
            raise UsageError(f"{broken} (header of {length} bytes in a file of {size}); {advice}")
        try:
            header = json.loads(handle.read(length))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            raise UsageError(f"{broken} (unreadable header); {advice}") from None
    check_shape(header, SAFETENSORS_HEADER, p)
    spans = []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        bits = math.prod(entry["shape"]) * SAFETENSORS_DTYPE_BITS[entry["dtype"]]
        if end < begin or end - begin != bits // 8 or bits % 8:
            raise UsageError(
                f"{p}: tensor {name}: data_offsets {begin}..{end} ({end - begin} bytes) disagree with "
                f"its shape {entry['shape']} of {entry['dtype']} ({bits / 8:g} bytes); {advice}"
            )
        spans.append((begin, end, name))
    position = 0
    for begin, end, name in sorted(spans):
        if begin != position:
            raise UsageError(
                f"{p}: tensor {name} starts at byte {begin} of the data, expected {position} (the "
                f"tensors {'overlap' if begin < position else 'leave a gap'}); {advice}"
            )
        position = end
    if 8 + length + position != size:
        raise UsageError(f"{broken} ({size} bytes, the header describes {8 + length + position}); {advice}")
    return header


# CTranslate2 model folders: these are the bytes per element of float32, int8, int16, int32, float16 and bfloat16, in
# CTranslate2's DataType order.
CT2_DTYPE_BYTES = (4, 1, 2, 4, 2, 2)


def _ct2_variables(handle, size: int) -> None:
    """Walk model.bin's variable table and check each variable's byte count against its dims and the file's length.

    In CTranslate2's binary layout (versions 4 to 6) each variable is stored as its name, rank, dims, dtype, byte
    count and bytes. A problem raises a ValueError.
    """

    def read(fmt: str):
        data = handle.read(struct.calcsize("<" + fmt))
        if len(data) != struct.calcsize("<" + fmt):
            raise ValueError(f"ends at byte {handle.tell()} inside its variable table")
        return struct.unpack("<" + fmt, data)

    def string() -> str:
        (n,) = read("H")
        data = handle.read(n)
        if len(data) != n:
            raise ValueError(f"ends at byte {handle.tell()} inside a name")
        return data.rstrip(b"\0").decode("utf-8", "replace")

    string(), read("I")  # the spec's name and revision
    (count,) = read("I")
    for _ in range(count):
        name = string()
        (rank,) = read("B")
        dims = read("I" * rank)
        dtype, num_bytes = read("BI")
        if dtype >= len(CT2_DTYPE_BYTES) or num_bytes != math.prod(dims) * CT2_DTYPE_BYTES[dtype]:
            raise ValueError(f"variable {name}: {num_bytes} bytes disagree with its shape {list(dims)}")
        if handle.tell() + num_bytes > size:
            raise ValueError(f"variable {name} needs bytes up to {handle.tell() + num_bytes}, the file has {size}")
        handle.seek(num_bytes, os.SEEK_CUR)
    (aliases,) = read("I")
    for _ in range(2 * aliases):
        string()


def check_ctranslate2_folder(folder: str | os.PathLike, what: str = "CTranslate2 model folder") -> Path:
    """Check a CTranslate2 model folder before CTranslate2 reads it, and return it; CTranslate2 itself aborts or
    prints its own error on a broken one. It checks that model.bin is complete, that config.json is an object of
    CTranslate2's settings, that the vocabulary files are lists of token strings, and that our vaswani_ctranslate2.json
    (if present) has its declared shape, and that its tokenizer.json (if present) is a tokenizer the library reads
    (`check_tokenizer_file`). A problem raises a UsageError naming the file."""
    folder = Path(folder)
    check_library_input(folder, f"{what} {folder}", "CTranslate2 and the tokenizers library")
    model = folder / "model.bin"
    if not model.is_file():
        raise UsageError(
            f"{folder} is not a {what} (no model.bin); create one with `vaswani-export-ctranslate2 "
            "--model_dir ... --out_dir ...`"
        )
    size = model.stat().st_size
    with open(model, "rb") as handle:
        head = handle.read(4)
        version = int.from_bytes(head, "little") if len(head) == 4 else 0
        if not 1 <= version <= 64:
            raise UsageError(f"{model}: not a CTranslate2 model file ({size} bytes); {CT2_CONFIG.advice}")
        if 4 <= version <= 6:  # this check knows these layouts, and leaves others to CTranslate2
            try:
                _ct2_variables(handle, size)
            except (ValueError, struct.error) as error:
                raise UsageError(f"{model}: truncated or corrupt ({error}); {CT2_CONFIG.advice}") from None
    read_json(folder / "config.json", CT2_CONFIG, what=f"config.json of {what} {folder}")
    vocabularies = (
        [folder / f"{name}_vocabulary.json" for name in ("shared",)]
        if (folder / "shared_vocabulary.json").is_file() or not (folder / "source_vocabulary.json").is_file()
        else [folder / f"{name}_vocabulary.json" for name in ("source", "target")]
    )
    for path in vocabularies:
        if not path.is_file() and path.with_suffix(".txt").is_file():
            continue  # the older text form, one token per line, is left to CTranslate2
        tokens = read_json(path, CT2_VOCABULARY, what=f"vocabulary of {what} {folder}")
        if not tokens:
            raise UsageError(f"{path}: an empty vocabulary; {CT2_VOCABULARY.advice}")
    if (folder / "vaswani_ctranslate2.json").is_file():
        read_json(folder / "vaswani_ctranslate2.json", CT2_METADATA)
    if (folder / "tokenizer.json").is_file():
        check_tokenizer_file(folder / "tokenizer.json", what=f"tokenizer.json of {what} {folder}")
    return folder


__all__ = ["SAFETENSORS_DTYPE_BITS", "SAFETENSORS_HEADER", "check_safetensors", "check_ctranslate2_folder"]
