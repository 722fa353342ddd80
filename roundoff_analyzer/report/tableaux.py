"""Where libraries compared at one method name ran different rules (torchdiffeq's rk4 is the 3/8 rule, the others'
the classical one): their errors against their own float64 runs are comparable, their solutions are not the same."""

from __future__ import annotations

import pandas as pd

from . import formatting


def tableau_notes(results: pd.DataFrame) -> list[str]:
    """One sentence per method name under which the libraries of this sweep ran more than one tableau."""
    if "tableau" not in results.columns:
        return []
    ran = results[results["tableau"].notna()]
    notes = []
    for method, runs in ran.groupby("method", sort=False):
        by_tableau = runs.drop_duplicates(["library", "tableau"]).groupby("tableau", sort=False)["library"]
        if by_tableau.ngroups < 2:
            continue
        parts = [f"{formatting.listing(list(libraries))} ran `{tableau}`" for tableau, libraries in by_tableau]
        notes.append(
            f"At method `{method}` the libraries ran different tableaux: {'; '.join(parts)}. Each run's error is "
            "against the float64 run of its own library, so the errors compare; the solutions themselves differ by "
            "the tableaux' discretisation error (the `tableau` column of results.parquet names each row's rule)."
        )
    return notes
