"""The regression check's default tolerance, in a module of its own:
`roundoff check --help` shows it without pandas or torch."""

# Chosen so that the same sweep on two CPUs passes; docs/ci.md,
# "How the default tolerances were chosen", has the numbers.
DEFAULT_FACTOR = 2.0
DEFAULT_FLOOR_U = 0.25
