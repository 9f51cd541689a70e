"""`toolgate release init NAME`: a new release package of one read and one write tool, and the project
around it."""

from toolgate.moved_modules import old_attributes

__getattr__ = old_attributes(__name__)  # the old module of this name's attributes (deprecated)
