"""The command-line tools, one module each (`vaswani-<tool>` entry points and the thin `scripts/<tool>.py` files): a
tool is one declaration (`command.Command`: its parser, its paths by role and kind, the inputs that must agree,
`resolve` and `run`), listed in `registry.COMMANDS`, and run by `command.run_command` under `contract.run_cli` in one
order (one line and exit 2 for bad input, nothing changed that existed before unless `--overwrite` and the tool wrote
it, no traceback unless `--debug`)."""
