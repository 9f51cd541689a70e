"""Evaluation fixtures and runners: the adversarial dispatch cases and their runner
(`toolgate.evals.adversarial`, `toolgate.evals.dispatch_runner`) and the legacy-timeout lab
(`toolgate.evals.legacy`). The candidate-versus-control release gate builds on these."""
