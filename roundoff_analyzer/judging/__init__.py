"""Pure rules over the tables: the verdict and the answer per dtype, and `roundoff check` against a baseline."""
