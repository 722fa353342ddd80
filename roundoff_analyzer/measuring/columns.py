"""The names of the measured columns that the row builder, the results table's schema, `check` and the tests share.
A module of names only, so that the readers of the table need not import the code that measures."""

from __future__ import annotations

ERROR_METRICS = ("sol_rel_err", "final_rel_err", "loss_rel_err", "grad_y0_rel_err", "grad_params_rel_err")
# Significant digits estimated from stochastically rounded repeats, one per error metric.
SIG_DIGITS = tuple(f"sig_digits_{name.removesuffix('_rel_err')}" for name in ERROR_METRICS)
# What the forward solve cost, the run's beside its reference's; steps and tolerances for adaptive methods only.
STEP_COLUMNS = (
    "nfe",
    "reference_nfe",
    "accepted_steps",
    "rejected_steps",
    "reference_accepted_steps",
    "reference_rejected_steps",
    "rtol",
    "atol",
    "max_steps",
)
# Where modules were kept in float32: the share of the field's operations the kept part ran, and the share computed in
# the low dtype (measuring/kept_share.py).
KEPT_SHARE_COLUMNS = ("kept_op_share", "low_dtype_op_share")
# The float64 reference's own size, per quantity the errors compare (the final state's is the solution's): what
# `check` compares to see a reference that moved (judging/yardstick_check.py), which the errors against it cannot show.
REFERENCE_NORM_COLUMNS = (
    "reference_sol_norm",
    "reference_loss_norm",
    "reference_grad_y0_norm",
    "reference_grad_params_norm",
)
# The per-module table (measuring/module_hooks.py): the row of the vector field as a whole, and a row's measurement
# where every call's local error was recomputed.
VECTOR_FIELD = "(vector field)"
# The row of a model given as its training step, as a whole (its own calls, if the step makes any).
WHOLE_MODEL = "(model)"
COMPLETE = "complete"
