"""`python -m roundoff_cli`: the same as the `roundoff` command."""

from .app import main

main()
