"""The `toolgate worker run` loop: delivery of approved writes, backoff, waking interrupted threads,
graceful shutdown."""
