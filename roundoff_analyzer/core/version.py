"""The package's version, in a module of its own: every stage that writes it (manifests, reports) imports it from here."""

__version__ = "0.1.0"
