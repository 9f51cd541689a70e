"""Chat models: selection from settings, the offline demo model and its `tool_choice`, and the OpenAI
and Anthropic providers."""
