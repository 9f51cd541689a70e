"""Evaluation fixtures and the runner that scores a release against them (see `toolgate.evals.runner`)."""
