"""`python -m engram_pipelines.cli`: the command line, as the installed `engram-pipelines` script."""

from engram_pipelines.cli import main

main()
