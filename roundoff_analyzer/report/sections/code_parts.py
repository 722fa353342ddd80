"""The parts of the answer's code that both forms of model share: the solver's arguments, what comes before the
training loop, and what follows the backward: the optimizer's step as the runs measured it (GradScaler's loop with the
clip after `unscale_`), and nothing they did not (no update of low-precision weights after a `pure` run)."""

from __future__ import annotations

from ...judging import answer as answering


def solver_arguments(a: answering.Answer, method: str) -> list[str]:
    """The solver's keyword arguments as the runs solved: the method, the adjoint scaler, the low trajectory."""
    arguments = [f'method="{method}"']
    if a.scaling == "dynamic":
        arguments.append("scaler=DynamicAdjointScaler()")
    if a.library == "native-low":
        arguments.append('trajectory_dtype="low"')
    return arguments


def before_loop(a: answering.Answer, owner: str, dtype: str, device_type: str) -> list[str]:
    """What is written once before the training loop: the kept modules, the cast of pure mode, the GradScaler."""
    lines = []
    if a.kept is not None:
        lines.append(f'roundoff_analyzer.keep_float32({owner}, "{a.kept.value}")  # once, after building the model')
    if a.mode == "pure":
        lines.append(f"{owner} = {owner}.to({dtype})")
    if a.scaling == "grad":
        lines.append(f'scaler = torch.amp.GradScaler("{device_type}")  # once, before the training loop')
    return lines


def after_backward(a: answering.Answer, owner: str) -> list[str]:
    """The lines after `loss.backward()` for answer `a`; `owner` holds the parameters (`func`, `model`)."""
    if a.mode == "pure":
        # The sweep measured the gradient, not what an optimizer does with low-precision weights.
        scaled = (
            ["    # the gradients are scaler.get_scale() times the true ones: divide them by it before use"]
            if a.scaling == "grad"
            else []
        )
        return [
            *scaled,
            f"    # this sweep measured these gradients; an update of {a.dtype} weights is a training's question "
            "(`roundoff train --mode pure`)",
        ]
    clip = f"    torch.nn.utils.clip_grad_norm_({owner}.parameters(), max_norm)  # if you clip"
    if a.scaling == "grad":
        return [
            "    scaler.unscale_(optimizer)  # the true gradients, before any clip",
            f"{clip}: after unscale_",
            "    scaler.step(optimizer)",
            "    scaler.update()",
        ]
    return [clip, "    optimizer.step()"]
