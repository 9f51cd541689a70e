"""Tools whose arguments are a declared JSON Schema (OpenAI or Anthropic definitions): the tool, its
registration checks, the validator and formats it trusts, and the errors a model reads."""

from toolgate.moved_modules import old_attributes

__getattr__ = old_attributes(__name__)  # the old module of this name's attributes (deprecated)
