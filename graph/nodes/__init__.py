"""One module per node of the gateway graph."""
