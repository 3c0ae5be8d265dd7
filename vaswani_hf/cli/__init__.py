"""The command-line tools, one module each (`vaswani-<tool>` entry points and the thin `scripts/<tool>.py` files):
each has `build_parser()` and `main(argv)`, declares its inputs and outputs (`contract.declare_paths`) and its flags'
constraints, and runs under `contract.run_cli` (one line and exit 2 for bad input, nothing changed that existed before
unless `--overwrite` and the tool wrote it, no traceback unless `--debug`)."""
