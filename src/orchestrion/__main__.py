"""`python -m orchestrion` is the same as the `orchestrion` command."""

from .cli import main

main()
