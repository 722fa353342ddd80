"""The code the answer writes for a trajectory problem, as its rows ran: the imports, the solve, the loss formed where
they formed it, the scaling they measured; a training step's is step_code.py's (the parts both share: code_parts.py)."""

from __future__ import annotations

from ...axes.models.problem import recorded_as_step
from ...judging import answer
from .. import formatting
from .code_parts import after_backward, backward_line, before_loop, library_imports, loss_line, solver_arguments
from .model_code import ModelCode
from .step_code import step_code_lines


def code_method(library: str, method: str) -> str:
    """The method name to write for the answer's solver: the native rows' rk4 is the classical rule, which the drop-in
    names `rk4_classical` (its `rk4` is torchdiffeq's, the 3/8 rule)."""
    return "rk4_classical" if formatting.library_member(library, "native_solver") and method == "rk4" else method


def code_lines(
    a: answer.Answer, device: str | None = None, problem: dict | None = None, measured: ModelCode = ModelCode()
) -> list[str]:
    """The lines to write in a training script for this answer, as its rows ran: the solve, the loss formed where
    they formed it, the scaling they measured (GradScaler's loop with the clip after `unscale_`, or the native
    solver's adjoint scaler) and nothing they did not (no update of low-precision weights after a `pure` run).
    Nothing for "do not", nor for a format emulated in software: no torch dtype computes in it; one line saying why
    not for a library that declares no `import_line` (or is not installed here). `problem`: the
    manifest's record of the model's form; a training step's code calls the user's step. `measured`: the code that
    builds a built-in model as the sweep measured it, which the lines start from."""
    if not a.train or a.arithmetic == "emulated":
        return []
    import_line = formatting.library_import_line(a.library)
    if formatting.writes_no_code(import_line):
        assert import_line is not None
        return [import_line]  # code that calls an odeint it never imported would not run as handed
    # A training answer has its method, chosen among the methods that ran, so at one n_timesteps at least.
    assert a.method is not None and a.n_timesteps is not None
    device_type = "cuda" if device and str(device).startswith("cuda") else "cpu"
    dtype = f"torch.{a.dtype.split()[0]}"
    if problem is not None and recorded_as_step(problem):
        return step_code_lines(a, device_type, dtype, code_method(a.library, a.method), problem, measured)
    solve_args = solver_arguments(a, code_method(a.library, a.method))
    y0 = f"y0.to({dtype})" if a.mode == "pure" and not a.plain_float32 else "y0"
    solve = f"trajectory = odeint(func, {y0}, torch.linspace(0, 1, {a.n_timesteps + 1}), {', '.join(solve_args)})"
    inside = a.loss_in == "autocast"
    if a.plain_float32:
        loss = "loss = loss_fn(trajectory)  # float32 throughout, as measured"
    elif not inside:
        loss = (
            "loss = loss_fn(trajectory.float())  # formed in float32"
            + (", outside autocast" if a.mode != "pure" else "")
            + ", as measured"
        )
    else:
        loss = (
            "loss = loss_fn(trajectory)  # formed "
            + (f"from the {a.dtype} output" if a.mode == "pure" else "inside autocast")
            + ", as measured"
        )
    lines = [
        *measured.around(library_imports(a, step=False, whole_script=bool(measured.lines))),
        *before_loop(a, "func", dtype, device_type),
        "for y0 in batches:",
    ]
    if a.plain_float32:
        lines += ["    optimizer.zero_grad()", f"    {solve}", f"    {loss}"]
    elif a.mode == "pure":
        lines += [f"    {solve}", f"    {loss}"]
    else:
        cache = ", cache_enabled=False" if a.mode == "autocast-nocache" else ""
        lines += [
            "    optimizer.zero_grad()",
            f'    with torch.autocast("{device_type}", dtype={dtype}{cache}):',
            f"        {solve}",
        ]
        lines.append(f"        {loss}" if inside else f"    {loss}")
    lines.append(backward_line(a))
    return lines + after_backward(a, "func") + loss_line(bool(measured.lines))
