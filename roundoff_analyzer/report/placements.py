"""A sweep over where the loss is formed, in the report's detail sections: each placement reads as a mode of its own."""

from __future__ import annotations

import pandas as pd


def placements_as_modes(table: pd.DataFrame) -> pd.DataFrame:
    """`table` with its mode read as 'autocast, loss in autocast' where the sweep formed its loss in more than one
    place, so that the tables, findings and figures that tell setups apart by mode tell the placements apart too
    (the verdict and the answer judge the loss_in column itself)."""
    if "loss_in" not in table or table["loss_in"].nunique() < 2:
        return table
    return table.assign(mode=table["mode"].astype(str) + ", loss in " + table["loss_in"].astype(str))
