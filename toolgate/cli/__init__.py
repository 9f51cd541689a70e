"""The `toolgate` operator command line: one module per command group (`toolgate.cli.app` is the entry
point)."""

from toolgate.moved_modules import old_attributes

__getattr__ = old_attributes(__name__)  # the old module of this name's attributes (deprecated)
