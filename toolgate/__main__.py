"""``python -m toolgate`` runs the CLI."""

from toolgate.cli import main

main()
