"""The `roundoff` command line (installed as the package `roundoff_cli`)."""
