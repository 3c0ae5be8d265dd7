"""The command-line tools, one module each: a declaration (`command.Command`) listed in `registry.COMMANDS` and run
under the one contract (`contract.run_cli`)."""
