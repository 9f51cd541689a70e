"""Chat models: selection from settings, the offline demo model and its `tool_choice`, and the OpenAI
and Anthropic providers."""

from toolgate.moved_modules import old_attributes

__getattr__ = old_attributes(__name__)  # the old module of this name's attributes (deprecated)
