"""One registry per sweep axis (models, data, methods, dtypes, roundings, arithmetics, modes, scalings, loss placements,
libraries),
each value a small module registered in its axis's package, and the grid: the product of the axes' values.

Nothing is imported here: `axes.names` and `axes.scaler_settings` load without torch (for `--help`)."""
