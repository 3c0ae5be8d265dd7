"""Files in and out, in one place, so each rule is written once: `io.text` (the one text and JSON reader and
writer), `io.outputs` (what a command may write, atomically, one run at a time), `io.files` (the declared shape of
every file the package reads, one line naming file and field) and `io.models` (model folders, checked cheaply and
loaded strictly). Their errors are `vaswani_hf.errors`' (`UsageError`: exit 2; `RunFailure`: 1).
"""

from ..errors import STDIO, InputLineError, RunFailure, UsageError, VaswaniError
from . import files
from .binary_files import check_ctranslate2_folder
from .files import FileShape, check_shape, check_tokenizer_file
from .models import (
    WEIGHTS,
    WEIGHTS_INDEX,
    check_generation_config_file,
    check_model_folder,
    check_safetensors,
    check_same_vocabulary,
    load_model_folder,
    model_vocab_size,
    tokenizer_size,
    weight_files,
)
from .outputs import (
    MARKER,
    UNUSABLE_WORKING_FOLDER,
    FolderLock,
    apply_umask,
    atomic_output_dir,
    check_not_relative,
    check_output_dir,
    check_output_file,
    check_paths,
    file_kind,
    first_entries,
    folder_in_use,
    fsync_tree,
    mark,
    path_kind,
    replace_atomically,
    written_by,
)
from .text import check_input_file, iter_lines, read_json, read_lines, to_json, write_json, write_lines

__all__ = [
    "STDIO",
    "VaswaniError",
    "UsageError",
    "RunFailure",
    "InputLineError",
    "iter_lines",
    "read_lines",
    "write_lines",
    "read_json",
    "write_json",
    "to_json",
    "check_input_file",
    "check_paths",
    "check_not_relative",
    "check_output_file",
    "check_output_dir",
    "replace_atomically",
    "atomic_output_dir",
    "fsync_tree",
    "written_by",
    "mark",
    "first_entries",
    "MARKER",
    "UNUSABLE_WORKING_FOLDER",
    "FolderLock",
    "folder_in_use",
    "apply_umask",
    "file_kind",
    "path_kind",
    "WEIGHTS",
    "WEIGHTS_INDEX",
    "weight_files",
    "check_model_folder",
    "load_model_folder",
    "check_safetensors",
    "check_same_vocabulary",
    "tokenizer_size",
    "model_vocab_size",
    "check_generation_config_file",
    "files",
    "FileShape",
    "check_shape",
    "check_tokenizer_file",
    "check_ctranslate2_folder",
]
