"""toolgate as an MCP server: the same gate for agents that call tools over the Model Context Protocol."""
