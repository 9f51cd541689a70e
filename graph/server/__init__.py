"""The LangGraph server's doors: the graph entry, the auth handler, the approval API and the reviewer
console."""
