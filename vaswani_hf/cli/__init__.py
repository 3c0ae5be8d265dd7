"""The command-line tools, one module each (the `vaswani-<tool>` console scripts and the thin `scripts/<tool>.py`
files, both started by the runner, vaswani_commands.py). A tool is one declaration (`command.Command`: its parser, its
paths by role and kind, the inputs that must agree, `resolve` and `run`), listed in `registry.COMMANDS` and run by
`command.run_command` under `contract.run_cli` in one order: bad input is one line and exit status 2, nothing that
existed before is changed unless `--overwrite` is given and the tool wrote it, and no traceback is shown unless
`--debug`.
"""
