"""The `gpuwizard` command line: `main` parses and dispatches; each command imports what it needs."""

from gpuwizard.cli.main import main

__all__ = ["main"]
