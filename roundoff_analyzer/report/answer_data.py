"""The answer and the verdicts as plain data (dicts of numbers
and words), for a notebook that should not parse markdown."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import pandas as pd

from ..judging import answer, verdict
from .sections.answer import answer_sentence, placement_line, timed_by_dtype
from .sections.answer_code import code_lines
from .sections.model_code import measured_model_code
from .sections.verdict import describe, judged


def answer_records(
    results: pd.DataFrame,
    device: str | None = None,
    problem: dict | None = None,
    card: dict | None = None,
    manifest: dict | None = None,
    timing: pd.DataFrame | None = None,
) -> dict[str, dict[str, Any]]:
    """Per dtype label, the answer the report gives: what to train with (or not), the numbers behind it, and the code
    (`problem`: the manifest's record of the model's form; `card`: its `device_details`; `manifest`: the whole, for
    the code that builds a built-in model as the sweep measured it; `timing`: the timing pass's table, where any)."""
    rows, _ = judged(results)
    records = {}
    found = answer.answers(rows)
    timed = timed_by_dtype(rows, found, timing)
    for a in found:
        j = a.judgement
        records[a.dtype] = {
            "dtype": a.dtype,
            "train": a.train,
            "label": j.label,
            "library": a.library,
            "scaling": a.scaling,
            "mode": a.mode,
            "loss_in": a.loss_in,
            "method": a.method,
            "n_timesteps": a.n_timesteps if a.train else None,
            "timesteps": list(a.timesteps),
            "arithmetic": a.arithmetic,
            "keep_float32": a.kept.value if a.kept is not None else "none",
            # min – max over the runs: the share of the field's operations the kept part ran, and computed in the dtype
            "kept_op_share": a.kept.op_share if a.kept is not None else None,
            "low_dtype_op_share": a.kept.low_share if a.kept is not None else None,
            **_numbers(j),
            "reason": describe(j),
            "sentence": _plain(answer_sentence(a, device, card, timed.get(a.dtype))),
            "placement": _plain(placement_line(a) or "") or None,
            "code": "\n".join(code_lines(a, device, problem, measured_model_code(manifest, results, j.judged_seed))),
            "judged_seed": j.judged_seed,
            "cost": asdict(a.cost) if a.cost is not None else None,
            "timed_cost": asdict(timed[a.dtype]) if a.dtype in timed else None,
        }
    return records


def verdict_records(results: pd.DataFrame) -> list[dict[str, Any]]:
    """Per dtype × library × mode × loss placement: the verdict, the setup that decided it and its numbers."""
    rows, _ = judged(results)
    return [
        {
            "dtype": v.dtype,
            "library": v.library,
            "mode": v.mode,
            "loss_in": v.loss_in,
            "label": v.label,
            "scaling": v.decided_by.scaling,
            "setup_label": v.decided_by.label,
            "reduction": v.reduction,
            **_numbers(v.decided_by),
            "reason": describe(v.decided_by),
        }
        for v in verdict.verdicts(rows)
    ]


def _numbers(j: verdict.SetupJudgement) -> dict[str, Any]:
    """The numbers a judgement rests on; a ratio's worst run as (method, n_timesteps)."""
    return {
        "worst_grad_params_rel_err": j.worst_grad,
        "worst_grad_params_over_u": j.worst_grad_over_u,
        "roundoff_to_noise": j.to_noise.value if j.to_noise else None,
        "noise_batch_size": j.noise_batch_size,
        "noise_uncertainty": j.noise_uncertainty,
        "near_threshold": j.to_noise_near,
        "roundoff_to_disc": j.to_disc.value if j.to_disc else None,
        "mostly_error": asdict(j.mostly_error) if j.mostly_error else None,
        "failures": [{"method": m, "n_timesteps": n, "failure_class": c} for m, n, c in j.failures],
        "n_runs": j.n_ran,
        "noise_known": j.noise_known,
    }


def _plain(text: str) -> str:
    return text.replace("**", "").replace("`", "")
