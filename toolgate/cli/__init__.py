"""The `toolgate` operator command line: one module per command group (`toolgate.cli.app` is the entry
point)."""
