"""Durable waits for jobs a completed write started: the worker's progress checks and the requesting
user's sealed credentials for them."""
