"""Release control at run time: routing threads between a control and a candidate bundle, pins,
shadowing, the automatic stop."""

from toolgate.moved_modules import old_attributes

__getattr__ = old_attributes(__name__)  # the old module of this name's attributes (deprecated)
