"""Proposals and reviewers' decisions: making an immutable proposal, recording a decision (the only way
authority enters), edits, rollbacks and the human-in-the-loop resume shape."""

from toolgate.moved_modules import old_attributes

__getattr__ = old_attributes(__name__)  # the old module of this name's attributes (deprecated)
