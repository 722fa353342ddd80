"""Foundations every stage uses: errors, the registry, text, JSON and file safety, input
validation, devices, threads."""
