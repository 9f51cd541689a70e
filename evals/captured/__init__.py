"""Production incidents as evaluation cases: capturing a thread's verified facts, reviewing and editing
the captured case, its MAC-bound rows and export."""

from toolgate.moved_modules import old_attributes

__getattr__ = old_attributes(__name__)  # the old module of this name's attributes (deprecated)
