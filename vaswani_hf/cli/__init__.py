"""The command-line tools, one module each (`vaswani-<tool>` entry points and the thin `scripts/<tool>.py` files):
each has `build_parser()` and `main(argv)`, and runs under `vaswani_hf.io.run_cli`'s contract (one line and exit 2
for bad input, nothing changed that existed before unless `--overwrite`, no traceback unless `--debug`)."""
