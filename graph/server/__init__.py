"""The LangGraph server's doors: the graph entry, the auth handler, the approval API and the reviewer
console."""

from toolgate.moved_modules import old_attributes

__getattr__ = old_attributes(__name__)  # the old module of this name's attributes (deprecated)
