"""The package's version, written only here: pyproject.toml reads it for the wheel's metadata (a dynamic version), and
every stage that writes it (manifests, reports) imports it from here."""

__version__ = "0.1.0"
