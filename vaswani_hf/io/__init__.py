"""Read and write files in one place: every tool and loader of vaswani_hf reads text, checks and loads model folders
and guards its outputs through this package, so that each rule is written once.

- `io.text` is the one text reader and writer. It reads strict UTF-8 and names the file and line of a bad byte, drops
  a byte-order mark, treats CRLF and CR as line ends, and reads one item per line. It opens every input kind once (`TextInput`), reads and writes JSON, and says what counts as an
  input file.
- `io.progress` makes every tool's progress report: a bar on a terminal, and plain lines in a log.
- `io.proofs` proves that what a resume reuses is what was written (sizes, lines and SHA-256).
- `io.outputs` decides what a command may write: an output never is, contains or lies inside an input, and only regular
  files and folders this package wrote are replaced, and only with `--overwrite`. It also writes atomically with the
  umask's modes, and locks a folder so that one run at a time writes into it.
- `io.files` declares the shape of every file the package reads (config.json, trainer_state.json, tokenizer.json,
  CTranslate2's JSON files, ...) and checks it when the file is read, refusing a bad file in one line naming the file
  and the field. `io.binary_files` checks the headers of the binary weight files (safetensors, CTranslate2's
  model.bin) in the same way. `io.panics` calls into the tokenizers library (Rust) so that a panic there becomes a
  refusal like any other, without Rust's report on the terminal.
- `io.models` checks model folders cheaply and loads them strictly, and checks that a tokenizer and weights share one
  vocabulary.

The errors they raise are those of `vaswani_hf.errors`: a `UsageError` exits with status 2 and a `RunFailure` with 1.
The command-line contract that reports them is `vaswani_hf.cli.contract`.
"""

from ..errors import STDIO, InputLineError, RunFailure, UsageError, VaswaniError
from . import files, proofs
from .binary_files import check_ctranslate2_folder
from .files import FileShape, check_library_input, check_shape, check_tokenizer_file
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
    library_path,
    mark,
    path_kind,
    replace_atomically,
    shortened,
    utf8_name,
    written_by,
)
from .text import (
    TextInput,
    check_input_file,
    check_read_once,
    format_lines,
    iter_lines,
    read_json,
    read_lines,
    reads_once,
    to_json,
    write_json,
    write_lines,
)

__all__ = [
    "STDIO",
    "VaswaniError",
    "UsageError",
    "RunFailure",
    "InputLineError",
    "TextInput",
    "reads_once",
    "check_read_once",
    "iter_lines",
    "read_lines",
    "write_lines",
    "format_lines",
    "read_json",
    "write_json",
    "to_json",
    "check_input_file",
    "check_paths",
    "check_not_relative",
    "check_output_file",
    "check_output_dir",
    "replace_atomically",
    "shortened",
    "atomic_output_dir",
    "library_path",
    "utf8_name",
    "check_library_input",
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
    "proofs",
    "FileShape",
    "check_shape",
    "check_tokenizer_file",
    "check_ctranslate2_folder",
]
