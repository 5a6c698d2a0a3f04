"""`python -m gpuwizard` and the `gpuwizard` command: a Ctrl-C while the modules still load exits 130, quietly."""

from __future__ import annotations

INTERRUPTED = 130  # codes.ExitCode.INTERRUPTED, not imported: this module must load before anything can fail


def entry() -> int:
    try:
        from gpuwizard.cli import main

        return main()
    except KeyboardInterrupt:
        return INTERRUPTED


if __name__ == "__main__":
    raise SystemExit(entry())
