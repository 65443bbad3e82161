"""``python -m oompost`` → the CLI."""

from .cli import main

main()
