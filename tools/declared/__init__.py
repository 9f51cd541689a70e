"""Tools whose arguments are a declared JSON Schema (OpenAI or Anthropic definitions): the tool, its
registration checks, the validator and formats it trusts, and the errors a model reads."""
