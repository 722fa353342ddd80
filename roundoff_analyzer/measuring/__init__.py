"""One configuration measured against its float64 reference: errors, failures and their causes, significance, and the
yardsticks the roundoff is judged by (discretisation error, gradient noise)."""
