"""``python -m toolgate`` runs the CLI."""

from toolgate.cli.app import main

main()
