"""The parts of the answer's code that both forms of model share: the solver's arguments, what comes before the
training loop, the backward, and what follows it: the optimizer's step as the runs measured it (GradScaler's loop with
the clip after `unscale_`), and nothing they did not (no update of low-precision weights after a `pure` run). What a
scaling adds to each is its own `code` (axes/scalings)."""

from __future__ import annotations

from ...judging import answer
from .. import formatting

INDENT = "    "


def scaling_imports(a: answer.Answer) -> list[str]:
    return list(formatting.scaling_code(a.scaling).imports)


def library_imports(a: answer.Answer, step: bool, whole_script: bool = False, answered: bool = False) -> list[str]:
    """The import lines of answer `a`'s code: its library's `import_line` and its scaling's imports; for a training
    step (`step`), also `equal_steps` (and `answered_by`, where the model's own torchdiffeq calls are `answered`).
    Where the library's line keeps the script's torchdiffeq import, that import is written when the code is a script
    of its own (a step's, or `whole_script`: a built-in model's, which builds its model itself); a user's script that
    solves with torchdiffeq has it already."""
    lines = ["import roundoff_analyzer"] if a.kept is not None else []
    import_line = formatting.library_import_line(a.library)
    solvers = f"from roundoff_analyzer.solvers import {'answered_by, ' if answered else ''}equal_steps"
    if step and formatting.library_member(a.library, "native_solver"):
        lines.append(f"{solvers}, odeint  # in place of torchdiffeq's odeint")
        return lines + scaling_imports(a)
    if step:
        lines.append(f"{solvers}  # a grid_constructor: n equal steps per solve")
    if import_line is not None or step or whole_script:
        lines.append(import_line or "from torchdiffeq import odeint")
    return lines + scaling_imports(a)


def solver_arguments(a: answer.Answer, method: str) -> list[str]:
    """The solver's keyword arguments as the runs solved: the method (an adaptive one's tolerances), the adjoint
    scaler, the low trajectory."""
    tolerances = [f"rtol={a.tolerances[0]:g}", f"atol={a.tolerances[1]:g}"] if a.tolerances is not None else []
    arguments = [f'method="{method}"', *tolerances, *formatting.scaling_code(a.scaling).solver_arguments]
    if formatting.library_member(a.library, "returns_low_trajectory"):
        arguments.append('trajectory_dtype="low"')
    return arguments


def before_loop(a: answer.Answer, owner: str, dtype: str, device_type: str) -> list[str]:
    """What is written once before the training loop: the kept modules, the cast of pure mode, the GradScaler."""
    lines = []
    if a.kept is not None:
        lines.append(f'roundoff_analyzer.keep_float32({owner}, "{a.kept.value}")  # once, after building the model')
    if a.mode == "pure" and not a.plain_float32:
        lines.append(f"{owner} = {owner}.to({dtype})")
    return lines + [line.format(device=device_type) for line in formatting.scaling_code(a.scaling).before_loop]


def backward_line(a: answer.Answer, comment: bool = True) -> str:
    """The loop's backward; `comment`: with what the scaling says of it (a `(func, y0, loss)` model's loop)."""
    code = formatting.scaling_code(a.scaling)
    return INDENT + code.backward + (code.backward_comment if comment else "")


def after_backward(a: answer.Answer, owner: str) -> list[str]:
    """The lines after `loss.backward()` for answer `a`; `owner` holds the parameters (`func`, `model`)."""
    code = formatting.scaling_code(a.scaling)
    if a.mode == "pure" and not a.plain_float32:
        # The sweep measured the gradient, not what an optimizer does with low-precision weights.
        return [
            *(INDENT + line for line in code.pure_note),
            f"    # this sweep measured these gradients; an update of {a.dtype} weights is a training's question "
            "(`roundoff train --mode pure`)",
        ]
    clip = f"torch.nn.utils.clip_grad_norm_({owner}.parameters(), max_norm)  # if you clip"
    steps = code.optimizer_step if code.optimizer_step is not None else ("{clip}", "optimizer.step()")
    return [INDENT + line.format(clip=clip) for line in steps]


def loss_line(whole_script: bool) -> list[str]:
    """The loop's last line in a script of its own (a built-in model's, a factory's): the loss each batch reached."""
    return [INDENT + 'print(f"loss {loss.item():.6g}")'] if whole_script else []
