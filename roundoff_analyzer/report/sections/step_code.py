"""The answer's code for a model given as its training step: the step the user wrote, handed an `odeint` that solves
as the chosen runs did (library, method, n_timesteps equal steps across each solve's span, the scaling), inside
autocast as the runs placed it (the whole step, or the solves alone)."""

from __future__ import annotations

from ...judging import answer
from .. import formatting
from .code_parts import after_backward, backward_line, before_loop, library_imports, loss_line, solver_arguments
from .model_code import ModelCode
from .routed_code import ADJOINT_SOLVE, routed_code


def step_code_lines(
    a: answer.Answer, device_type: str, dtype: str, method: str, problem: dict, measured: ModelCode = ModelCode()
) -> list[str]:
    """The lines to write for answer `a`: `dtype` the torch dtype's name (`torch.float16`), `method` the name to
    pass, `problem` the manifest's record of the step's solves (their span, and what the step's own calls name: the
    solve handed to the step drops them, as the sweep's did), `measured` the code that builds a built-in model as the
    sweep measured it."""
    assert a.n_timesteps is not None  # a training answer ran at one n_timesteps at least
    n = a.n_timesteps
    solver_options = [*solver_arguments(a, method), f"options=dict(grid_constructor=equal_steps({n}))"]
    if formatting.library_member(a.library, "odeint_takes_model"):
        solver_options.append("model=model")  # the parameters a field that is not a module reaches, as the sweep did
    span = f"t from {problem['t0']:.4g} to {problem['t1']:.4g}" if "t0" in problem else "its span"
    named = problem.get("solver_arguments")
    cache = ", cache_enabled=False" if a.mode == "autocast-nocache" else ""
    autocast = f'torch.autocast("{device_type}", dtype={dtype}{cache})'
    plain = a.plain_float32  # no autocast, no cast
    whole_step = a.loss_in == "autocast" or a.mode == "pure" or plain
    partial = whole_step and not named
    routed = routed_code(a, problem)
    imports = [
        *(["import functools"] if partial else []),
        *library_imports(a, step=True, answered=routed.context is not None),
        *routed.imports,
    ]
    lines = [*measured.around(imports), *routed.comments]
    lines += before_loop(a, "model", dtype, device_type)
    if named:
        # Passed on, the step's own method and options would override the measured solve (a keyword given to a
        # functools.partial wins over the partial's): dopri5's 50 evaluations run, not the 32 measured.
        lines += [f"# your step's odeint call names {_named_words(named)}; solve drops them, as the sweep did"]
    lines += _solve_lines("solve", "odeint", solver_options, partial, whole_step, autocast)
    if routed.adjoint_function is not None:
        lines += _solve_lines(
            ADJOINT_SOLVE, routed.adjoint_function, solver_options, partial, whole_step, autocast, adjoint=True
        )
    cast = a.mode == "pure" and not plain
    if cast:
        lines += [
            f"def to_low(x):  # the batch's floating-point tensors in {dtype}, as measured",
            f"    return x.to({dtype}) if torch.is_tensor(x) and x.is_floating_point() else x",
        ]
    cast_line = "    batch = torch.utils._pytree.tree_map(to_low, batch)  # in any nesting of tuples, dicts"
    lines += ["for batch in batches:", *([cast_line] if cast else []), "    optimizer.zero_grad()"]
    call = (
        f"loss = step(model, batch, solve)  # your step, each solve in {n} equal steps across its span ({span}), "
        "as measured"
    )
    contexts = [
        *([routed.context] if routed.context is not None else []),
        *([autocast] if whole_step and a.mode != "pure" and not plain else []),
    ]
    if contexts:
        lines += [f"    with {', '.join(contexts)}:", f"        {call}"]
    else:
        lines.append(f"    {call}")
    lines.append(backward_line(a, comment=False))
    return lines + after_backward(a, "model") + loss_line(bool(measured.lines))


def _solve_lines(
    name: str,
    function: str,
    solver_options: list[str],
    partial: bool,
    whole_step: bool,
    autocast: str,
    adjoint: bool = False,
) -> list[str]:
    """The definition of `name`, solving with `function` as the runs did; an adjoint's passes on the parameters a
    call names for its adjoint."""
    options = ", ".join(solver_options)
    if partial:
        return [f"{name} = functools.partial({function}, {options})"]
    passed = ', adjoint_params=named.get("adjoint_params")' if adjoint else ""
    if whole_step:
        return [
            f"def {name}(func, y0, t, **named):  # the step's own method, rtol, atol and options give way",
            f"    return {function}(func, y0, t, {options}{passed})",
        ]
    return [
        f"def {name}(func, y0, t, **named):  # autocast around the solves alone, their states back in float32",
        f"    with {autocast}:",
        f"        states = {function}(func, y0, t, {options}{passed})",
        "    return states.float() if isinstance(states, torch.Tensor) else tuple(s.float() for s in states)",
    ]


def _named_words(named: dict) -> str:
    """'method="dopri5", rtol=1e-05, atol=1e-05 and options max_num_steps': what the step's call passes."""
    words = [
        f'{key}="{value}"' if isinstance(value, str) else f"{key}={value:g}"
        for key, value in named.items()
        if key != "options"
    ]
    if named.get("options"):
        words.append(f"options {', '.join(named['options'])}")
    return ", ".join(words[:-1]) + (" and " if len(words) > 1 else "") + words[-1]
