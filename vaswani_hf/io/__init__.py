"""Files in and out, in one place: every tool and loader of vaswani_hf reads text, checks and loads model folders and
guards its outputs through this package, so each rule is written once.

- `io.text`: the one text reader and writer (strict UTF-8 naming file and line, BOM, CRLF/CR, one item per line),
  JSON, what counts as an input file.
- `io.outputs`: what a command may write (an output never is, contains or lies inside an input; only regular files
  and folders this package wrote are replaced, with `--overwrite`), atomic writes with the umask's modes, the run
  folder's lock.
- `io.files`: the declared shape of every file the package reads (config.json, trainer_state.json, tokenizer.json,
  safetensors headers, CTranslate2 folders, ...), checked when it is read: one line naming the file and the field.
- `io.models`: model folders, checked cheaply and loaded strictly; tokenizer and weights of one vocabulary.

The errors they raise (`UsageError`: exit status 2; `RunFailure`: 1) are `vaswani_hf.errors`'; the command-line
contract that reports them is `vaswani_hf.cli.contract`.
"""

from ..errors import STDIO, InputLineError, RunFailure, UsageError, VaswaniError
from . import files
from .files import FileShape, check_ctranslate2_folder, check_shape, check_tokenizer_file
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
)
from .outputs import (
    MARKER,
    FolderLock,
    apply_umask,
    atomic_output_dir,
    check_output_dir,
    check_output_file,
    check_paths,
    folder_in_use,
    file_kind,
    path_kind,
    fsync_tree,
    replace_atomically,
    written_by,
)
from .text import check_input_file, iter_lines, read_json, read_lines, to_json, write_json, write_lines

__all__ = [
    "STDIO", "VaswaniError", "UsageError", "RunFailure", "InputLineError",
    "iter_lines", "read_lines", "write_lines", "read_json", "write_json", "to_json", "check_input_file",
    "check_paths", "check_output_file", "check_output_dir", "replace_atomically", "atomic_output_dir", "fsync_tree",
    "written_by", "MARKER", "FolderLock", "folder_in_use", "apply_umask", "file_kind", "path_kind",
    "WEIGHTS", "WEIGHTS_INDEX", "check_model_folder", "load_model_folder", "check_safetensors",
    "check_same_vocabulary", "tokenizer_size", "model_vocab_size", "check_generation_config_file",
    "files", "FileShape", "check_shape", "check_tokenizer_file", "check_ctranslate2_folder",
]
