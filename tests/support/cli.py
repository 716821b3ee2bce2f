"""The command line as a user runs it, in process."""

from __future__ import annotations

from click.testing import CliRunner

from engram_pipelines.cli import main


def run(*args: str) -> tuple[int, str]:
    """Exit code and what a user reads: stdout alone under --json (a machine parses it), else both streams."""
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout if "--json" in args else result.output
