"""Adversarial dispatch cases that prove dispatch fails closed, by theme, and their runner through the
real graph."""

from toolgate.moved_modules import old_attributes

__getattr__ = old_attributes(__name__)  # the old module of this name's attributes (deprecated)
