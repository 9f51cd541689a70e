"""Adversarial dispatch cases that prove dispatch fails closed, by theme, and their runner through the
real graph."""
