"""Proposals and reviewers' decisions: making an immutable proposal, recording a decision (the only way
authority enters), edits, rollbacks and the human-in-the-loop resume shape."""
