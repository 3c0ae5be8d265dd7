"""Hold the command-line tools, one module each.

Each tool is started as a `vaswani-<tool>` console script or as a thin `scripts/<tool>.py` file, and both go through
the runner, vaswani_commands.py. A tool is one declaration (`command.Command`), which states its parser, its paths by
role and kind, the inputs that must agree, and its `resolve` and `run` steps. The tools are listed once, in
`vaswani_commands.TOOLS`; their declarations are `registry.COMMANDS`, and `command.run_command` runs each one under
`contract.run_cli`, always in the same order. Bad input is reported in one line with exit status 2, nothing that
existed before is changed unless `--overwrite` is given and the tool wrote it, and no traceback is shown unless
`--debug` is given.
"""
