"""Bring your own tools: the shapes a tool arrives in (typed functions, LangChain tools, provider JSON
definitions, MCP servers, third-party registration), how each is called, and the operator policy no
tool source can state for itself."""
