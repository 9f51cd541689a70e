"""Running effects: reads under their limits, approved writes behind the atomic claim exactly once, the
handler's scope and credentials, and recovery of unknown outcomes."""

from toolgate.moved_modules import old_attributes

__getattr__ = old_attributes(__name__)  # the old module of this name's attributes (deprecated)
