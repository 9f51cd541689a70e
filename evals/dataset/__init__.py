"""The packaged evaluation dataset: its case modules by theme, their shared builders, and the
deterministic generator (`python -m toolgate.evals.dataset.build`)."""
