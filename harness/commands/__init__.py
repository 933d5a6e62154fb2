"""Floor 8: the `moe-harness` commands, one module each (`add_arguments(parser)`,
`main(args) -> int`); `cli.py` wires them. Library code never imports a command."""
