"""The answer's code for a model given as its training step: the step the user wrote, handed an `odeint` that solves
as the chosen runs did (library, method, n_timesteps equal steps across each solve's span, the scaling), inside
autocast as the runs placed it (the whole step, or the solves alone)."""

from __future__ import annotations

from ...judging import answer as answering
from .code_parts import after_backward, backward_line, before_loop, scaling_imports, solver_arguments
from .routed_code import routed_lines


def step_code_lines(a: answering.Answer, device_type: str, dtype: str, method: str, problem: dict) -> list[str]:
    """The lines to write for answer `a`: `dtype` the torch dtype's name (`torch.float16`), `method` the name to
    pass, `problem` the manifest's record of the step's solves (their span)."""
    assert a.n_timesteps is not None  # a training answer ran at one n_timesteps at least
    n = a.n_timesteps
    solver_options = [*solver_arguments(a, method), f"options=dict(grid_constructor=equal_steps({n}))"]
    span = f"t from {problem['t0']:.4g} to {problem['t1']:.4g}" if "t0" in problem else "its span"
    lines = ["import functools", *_imports(a), *routed_lines(a, problem, solver_options)]
    lines += before_loop(a, "model", dtype, device_type)
    cache = ", cache_enabled=False" if a.mode == "autocast-nocache" else ""
    autocast = f'torch.autocast("{device_type}", dtype={dtype}{cache})'
    whole_step = a.loss_in == "autocast" or a.mode == "pure"
    if whole_step:
        lines.append(f"solve = functools.partial(odeint, {', '.join(solver_options)})")
    else:
        lines += [
            "def solve(func, y0, t, **ignored):  # autocast around the solves alone, their states back in float32",
            f"    with {autocast}:",
            f"        states = odeint(func, y0, t, {', '.join(solver_options)})",
            "    return states.float() if isinstance(states, torch.Tensor) else tuple(s.float() for s in states)",
        ]
    pure = f"  # its floating-point tensors in {dtype}" if a.mode == "pure" else ""
    lines += [f"for batch in batches:{pure}", "    optimizer.zero_grad()"]
    call = (
        f"loss = step(model, batch, solve)  # your step, each solve in {n} equal steps across its span ({span}), "
        "as measured"
    )
    if whole_step and a.mode != "pure":
        lines += [f"    with {autocast}:", f"        {call}"]
    else:
        lines.append(f"    {call}")
    lines.append(backward_line(a, comment=False))
    return lines + after_backward(a, "model")


def _imports(a: answering.Answer) -> list[str]:
    lines = ["import roundoff_analyzer"] if a.kept is not None else []
    if a.library in ("native", "native-low"):
        lines.append("from roundoff_analyzer.solvers import equal_steps, odeint  # in place of torchdiffeq's odeint")
    else:
        lines.append("from roundoff_analyzer.solvers import equal_steps  # a grid_constructor: n equal steps per solve")
        if a.library == "torchdiffeq-adjoint":
            lines.append("from torchdiffeq import odeint_adjoint as odeint")
        elif a.library == "torchdiffeq":
            lines.append("from torchdiffeq import odeint")
        else:
            lines.append(f"# solve with {a.library}, as this sweep did")
    return lines + scaling_imports(a)
