"""The answer, in words: per dtype one sentence (what to train with, or not to and why), the lines it changes in the
user's code, and what it costs; at the top of the report, at the end of `roundoff sweep` and in `roundoff show`."""

from __future__ import annotations

import pandas as pd

from ...axes.scalings import scales
from ...core import cards
from ...judging import answer, backward_modes, choice, format_search, timed_cost, verdict
from ...judging.seeds import seeds_of, several_seeds
from .. import formatting, seed_words
from ..findings import is_synthetic
from ..format_search import format_search_lines, format_search_terminal, summarised
from ..section_inputs import SectionInputs
from .answer_code import code_lines
from .glossary import glossary
from .model_code import measured_model_code
from .verdict import describe, judged

LOSS_WORDS = {"float32": "in float32, outside autocast", "autocast": "inside autocast"}


def placement_line(a: answer.Answer) -> str | None:
    """Where both loss placements of the chosen setup ran and earned different labels: which to use, and why."""
    other = a.other_placement
    if other is None:
        return None
    here, there = (LOSS_WORDS.get(p, f"in `{p}`") for p in (a.loss_in, other.loss_in))
    return f"Form the loss {here}: formed {there}, the same setup is {other.label}: {describe(other)}."


def answer_sentence(
    a: answer.Answer, device: str | None = None, card: dict | None = None, timed: timed_cost.TimedCost | None = None
) -> str:
    """One sentence: dtype, library, scaling, mode, method and n_timesteps; or "do not" and why; and the cost (`card`:
    the manifest's `device_details`, which say whether the card has tensor cores for the dtype; `timed`: the setup as
    the timing pass after the sweep timed it, where it did)."""
    if a.kept is not None and not a.kept.computes_low:
        return kept_throughout_sentence(a)
    if not a.train and not a.judgement.noise_known and not a.judgement.failures:
        # Only the accuracy was judged: nothing says whether training would feel the roundoff.
        return (
            f"**{a.dtype}**: no answer for training: the gradient noise was not measured (`--noise-batches 0`, or a "
            "model without a batch sampler), so nothing here says whether training feels the roundoff. For "
            f"accuracy, its best setup is {_setup(a)}: {describe(a.judgement)}."
        )
    if not a.train:
        return (
            f"**{a.dtype}**: do not train in {a.dtype}. Its best setup here, {_setup(a)}, is {a.judgement.label}: "
            f"{describe(a.judgement)}."
        )
    steps = (
        f"n_timesteps {formatting.value_range(a.timesteps, str)}"
        if len(a.timesteps) > 1
        else f"n_timesteps = {a.timesteps[0]}"
    )
    text = (
        f"**{a.dtype}**: train with {a.library}, {formatting.scaling_words(a.scaling)}, {a.method}, "
        f"{steps}{_under(a)} ({a.judgement.label}"
        + (
            f": the parameter-gradient roundoff is at most {formatting.in_u(a.judgement.to_noise.value)}× "
            f"{formatting.noise_at(a.judgement.noise_batch_size)}"
            + formatting.near(a.judgement.to_noise_near, a.judgement.noise_uncertainty)
            + seed_words.spread_words(a.judgement)
            if a.judgement.to_noise
            else ""
        )
        + ")."
    )
    if a.roundoff_dominates:
        text += f" {beyond(a.dtype, a.roundoff_dominates)}"
    if a.arithmetic == "emulated":
        text += f" These runs emulated {a.dtype} in software: what it would do, not code to train with today."
    if a.kept is not None:
        text += f" {kept_sentence(a.kept, a.dtype.split()[0])}"
    return f"{text} {cost_sentence(a, device, card, timed)}"


def kept_share_words(kept: answer.Kept, dtype: str) -> str | None:
    """What share of the field's work the kept part does, as measured: its operations in one evaluation, counted."""
    if kept.op_share is None:
        return None
    percent = lambda v: f"{v:.0%}"  # noqa: E731
    text = f"the kept part runs {formatting.value_range(kept.op_share, percent)} of the field's operations"
    if not kept.computes_low:
        return f"{text}, and the rest compute in float32 too: no operation computes in {dtype}"
    assert kept.low_share is not None  # computes_low reads it
    return f"{text}; {formatting.value_range(kept.low_share, percent)} of them compute in {dtype}"


def kept_throughout_sentence(a: answer.Answer) -> str:
    """A setup whose kept part is all of the field's work: float32 with extra casts, not one of its dtype."""
    assert a.kept is not None
    dtype = a.dtype.split()[0]
    share = kept_share_words(a.kept, dtype)
    return (
        f"**{a.dtype}**: not a {dtype} setup: {share} (counted over one evaluation of the field). Its runs, "
        f"{_setup(a)}, are {a.judgement.label} as float32 arithmetic: {describe(a.judgement)}."
    )


def kept_sentence(kept: answer.Kept, dtype: str) -> str:
    """What keeping the modules in float32 bought, the one change it takes and what it costs against keeping nothing."""
    names = formatting.listing(f"`{p}`" for p in kept.value.split("+"))
    if kept.turns_safe:
        assert kept.without is not None  # turns_safe compares against it
        text = (
            f"Keeping {names} in float32 is what makes {dtype} trainable here: without it, {dtype} is "
            f"{kept.without.label}."
        )
    elif kept.turns_setup_safe:
        same = kept.same_without
        assert same is not None  # turns_setup_safe compares against it
        text = (
            f"Keeping {names} in float32 is what makes this setup trainable: without it, {same.library} with "
            f"{_scaling(same.scaling)} is {same.label}"
        )
        if kept.without is not None:
            text += (
                f" ({dtype}'s best setup without it, {kept.without.library} with {_scaling(kept.without.scaling)}, "
                f"is {kept.without.label})"
            )
        text += "."
    elif kept.without is not None:
        text = (
            f"Without keeping {names} in float32, {dtype}'s best setup, {kept.without.library} with "
            f"{_scaling(kept.without.scaling)}, is {kept.without.label}."
        )
    else:
        text = f"These runs keep {names} in float32."
    share = kept_share_words(kept, dtype)
    if share is not None:
        text += f" Measured over one evaluation of the field, {share}."
    text += f' The one change: `roundoff_analyzer.keep_float32(func, "{kept.value}")` once the model is built.'
    ratio = lambda span: formatting.value_range(span, lambda v: f"{v:.2f}×")  # noqa: E731
    if kept.time_ratio is not None:
        text += f" It takes {ratio(kept.time_ratio)} the time of the same runs keeping nothing"
        text += (
            f" and {ratio(kept.memory_ratio)} their peak memory."
            if kept.memory_ratio is not None
            else " (peak memory not recorded)."
        )
    return text


def beyond(dtype: str, dominates) -> str:
    """'More steps buy no accuracy in float16 beyond n = 32: from there the roundoff of the solution exceeds its
    discretisation error (of the parameter gradient from n = 128).'"""
    ordered = sorted(dominates, key=lambda pair: pair[1])
    (quantity, first), rest = ordered[0], ordered[1:]
    others = [f"of the {q} from n = {n}" for q, n in rest if n != first]
    same = [q for q, n in rest if n == first]
    of = formatting.either([quantity, *same]).replace(" or ", " and ")
    tail = f" ({'; '.join(others)})" if others else ""
    return (
        f"More steps buy no accuracy in {dtype} beyond n = {first}: from there the roundoff of the {of} exceeds its "
        f"discretisation error{tail}."
    )


def _setup(a: answer.Answer) -> str:
    return f"{a.library} with {_scaling(a.scaling)}{_under(a)}"


def _under(a: answer.Answer) -> str:
    """' under `autocast`': how the runs computed; float32's computed in plain float32, whatever their mode."""
    return " in plain float32" if a.plain_float32 else f" under `{a.mode}`"


def _scaling(scaling: str) -> str:
    return formatting.scaling_words(scaling)


def card_words(dtype: str, card: dict | None) -> str | None:
    """Whether the sweep's card has tensor cores for `dtype`, as the manifest's `device_details` recorded it: 'float16
    has tensor cores on this card (NVIDIA H100 80GB HBM3, compute capability 9.0)'. None on a CPU, for a folder from
    before the record, and for a dtype tensor cores do not take."""
    card = card or {}
    has = (card.get("tensor_cores") or {}).get(dtype)
    first = cards.first_capability(dtype)
    if has is None or first is None or not card.get("compute_capability"):
        return None
    which = f"{card['name']}, " if card.get("name") else ""
    which += f"compute capability {card['compute_capability']}"
    if has:
        return f"{dtype} has tensor cores on this card ({which})"
    return (
        f"{dtype} on this card ({which}) runs without tensor cores (they take {dtype} from compute capability {first})"
    )


def cost_sentence(
    a: answer.Answer, device: str | None, card: dict | None = None, timed: timed_cost.TimedCost | None = None
) -> str:
    c = a.cost
    fast = card_words(a.dtype.split()[0], card)
    where = f"on {device}" if device else "on the sweep's device"
    if timed is not None:
        return timed_cost_sentence(a, timed, where, device, fast)
    if c is None or c.seconds is None:
        return f"Cost {where}: not measured" + (f"; {fast}." if fast else ".")
    if a.plain_float32:  # the run every other dtype's cost is set against
        seconds = formatting.value_range(c.seconds, lambda v: f"{v:.3g}")
        return f"Cost {where}: {seconds} s forward + backward{backward_words(c)}."
    ratio = lambda span: formatting.value_range(span, lambda v: f"{v:.2f}×")  # noqa: E731
    if c.time_ratio is not None:
        text = f"Cost {where}: {ratio(c.time_ratio)} float32's time"
        text += (
            f", {ratio(c.memory_ratio)} its peak memory"
            if c.memory_ratio is not None and c.memory_measured
            else ", peak memory not recorded"
        )
    else:
        text = (
            f"Cost {where}: {formatting.value_range(c.seconds, lambda v: f'{v:.3g}')} s forward + backward; no "
            "float32 run "
            "to compare with (add `--dtype float32`)"
        )
    if c.switch_time_ratio is not None:
        text += f"; against torchdiffeq in float32 (what this replaces), {ratio(c.switch_time_ratio)} its time"
        text += f", {ratio(c.switch_memory_ratio)} its peak memory" if c.switch_memory_ratio is not None else ""
    return text + _cost_caveats(a, device, fast) + "."


def timed_cost_sentence(
    a: answer.Answer, t: timed_cost.TimedCost, where: str, device: str | None, fast: str | None
) -> str:
    """The cost as the timing pass measured it: what was timed (method, n_timesteps, repeats, load), then the medians
    of the per-round ratios with their range."""
    load = f", load {_span(t.load, '.1f')}" if t.load is not None else ""
    what = (
        f"Cost {where}, timed again after the sweep ({t.method}, n_timesteps {t.n_timesteps}, forward + backward, "
        f"{t.repeats} interleaved repeats{load}{seed_words.timed_on(t.seed, ', ')})"
    )
    seconds = f"{t.seconds.median:.3g} s forward + backward ({_span((t.seconds.low, t.seconds.high), '.3g')})"
    if a.plain_float32:  # the run every other dtype's cost is set against
        return f"{what}: {seconds}."
    if t.time_ratio is None:
        text = f"{what}: {seconds}; float32 was not timed beside it"
    else:
        text = f"{what}: {timed_ratio_words(a.dtype.split()[0], t)}"
        text += "" if t.memory_ratio is not None else ", peak memory not recorded"
        if t.switch_ratio is not None:
            text += (
                f"; against torchdiffeq in float32 (what this replaces), {t.switch_ratio.median:.2f}× its time "
                f"({_span((t.switch_ratio.low, t.switch_ratio.high), '.2f')})"
            )
    return text + _cost_caveats(a, device, fast) + "."


def _cost_caveats(a: answer.Answer, device: str | None, fast: str | None) -> str:
    """What the cost's numbers do not say: the card's tensor cores, emulation on a CPU, a loss scale's search, and the
    native solver's backward."""
    text = f"; {fast}" if fast else ""
    if device is not None and str(device).startswith("cpu"):
        text += "; on a CPU low precision is emulated in software, so its speed says nothing of a GPU's"
    if formatting.scaling_searches(a.scaling):
        text += f"; `{a.scaling}`'s time includes the backward passes of its search for a loss scale"
    return text + (backward_words(a.cost) if a.cost is not None else "")


def backward_words(c: answer.Cost) -> str:
    """'; the native solver's backward: stored stages, peak 12.3 MiB', and where the float32 runs set against it ran
    another mode, that the ratio compares the two designs; nothing where no mode was recorded (another library)."""
    if not c.backward_modes:
        return ""
    text = f"; the native solver's backward: {backward_modes.said(c.backward_modes)}"
    if c.peak_bytes is not None:
        text += f", peak {formatting.value_range([v / 2**20 for v in c.peak_bytes], lambda v: f'{v:.3g}')} MiB"
    if c.float32_backward_modes and c.float32_backward_modes != c.backward_modes:
        text += (
            f" (float32's: {backward_modes.said(c.float32_backward_modes)}, so the ratios to float32 compare the two "
            "backwards, not only the dtypes)"
        )
    return text


def timed_ratio_words(dtype: str, t: timed_cost.TimedCost, detail: str = "") -> str:
    """'float16 with native takes 1.60× float32's time (1.50–2.20{detail}) and 70% of its peak memory': the median
    of the per-round ratios and their range."""
    assert t.time_ratio is not None  # the caller has a ratio to say
    r = t.time_ratio
    text = f"{dtype} with {t.library} takes {r.median:.2f}× float32's time ({_span((r.low, r.high), '.2f')}{detail})"
    return text + (f" and {t.memory_ratio:.0%} of its peak memory" if t.memory_ratio is not None else "")


def _span(pair: tuple[float, float], spec: str) -> str:
    low, high = (format(v, spec) for v in pair)
    return low if low == high else f"{low}–{high}"


def _on_this(device: str | None) -> str:
    kind = str(device or "").split(":")[0]
    return {"cpu": "on this CPU", "cuda": "on this GPU"}.get(kind, "on the sweep's device")


def timed_by_dtype(
    rows: pd.DataFrame, found: list[answer.Answer], timing: pd.DataFrame | None
) -> dict[str, timed_cost.TimedCost]:
    """Each answer's setup as the timing pass timed it, by dtype label, where it did."""
    timed = {a.dtype: timed_cost.timed_cost(rows, timing, a) for a in found}
    return {dtype: t for dtype, t in timed.items() if t is not None}


def section(inputs: SectionInputs) -> list[str]:
    return answer_section(
        inputs.judged, inputs.sweep.manifest.get("device"), inputs.sweep.manifest, inputs.figures, inputs.sweep.timing
    )


def answer_section(
    results: pd.DataFrame,
    device: str | None,
    manifest: dict | None = None,
    figures: dict[str, tuple[str, str]] | None = None,
    timing: pd.DataFrame | None = None,
) -> list[str]:
    """The chosen setup first, then per dtype its sentence (the emulated formats of a format search summarised);
    `timing`: the timing pass's table, where the folder has one."""
    rows, at = judged(results)
    found = answer.answers(rows)
    if not found:
        return []
    formats = format_search.format_results(rows, found)
    timed = timed_by_dtype(rows, found, timing)
    first = seed_words.differs_first((f"{a.dtype} with {_setup(a)}", a.judgement) for a in found)
    lines = ["## The answer", "", at + first + headline(rows, found, manifest or {}, device, timed), ""]
    for a in per_dtype(found, formats):
        placement = placement_line(a)
        card = (manifest or {}).get("device_details")
        sentence = answer_sentence(a, device, card, timed.get(a.dtype))
        lines.append(f"- {at}{sentence}" + (f" {placement}" if placement else ""))
        measured = measured_model_code(manifest, results, a.judgement.judged_seed)
        code = code_lines(a, device, (manifest or {}).get("problem"), measured)
        if code:
            lines += ["", "  ```python", *(f"  {line}" for line in code), "  ```", ""]
    searched = format_search_lines(rows, formats, figures or {})
    if searched:
        lines += ([] if lines[-1] == "" else [""]) + searched
    return (
        lines
        + ([] if lines[-1] == "" else [""])
        + ["Words used in this report:", ""]
        + [f"- {line}" for line in glossary(results, (manifest or {}).get("problem"))]
    )


def per_dtype(found: list[answer.Answer], formats: list) -> list[answer.Answer]:
    """The answers that get a sentence each: all but the emulated formats that the format search summarises."""
    hidden = summarised(formats)
    return [a for a in found if a.dtype not in hidden]


def headline(
    rows: pd.DataFrame,
    found: list[answer.Answer],
    manifest: dict,
    device: str | None,
    timed: dict[str, timed_cost.TimedCost] | None = None,
) -> str:
    """The one setup to train with, the reason in numbers, and the weights and data it was judged on."""
    chosen = choice.choose(rows, found)
    on = judged_on(manifest, rows)
    if chosen is None:
        # A setup computing nothing in its dtype (its kept part is the whole field) is no dtype's best.
        low = [a for a in found if a.kept is None or a.kept.computes_low] or found
        best = min(low, key=lambda a: verdict.rank(a.judgement))
        return (
            f"**No dtype swept is safe for training here.** The best, {best.dtype} with {_setup(best)}, is "
            f"{best.judgement.label}: {describe(best.judgement)}. {on}"
        )
    a = chosen.answer
    steps = (
        f"n_timesteps {formatting.value_range(a.timesteps, str)}"
        if len(a.timesteps) > 1
        else f"n_timesteps {a.timesteps[0]}"
    )
    loss = f", the loss formed {LOSS_WORDS.get(chosen.loss_in, f'in `{chosen.loss_in}`')}" if chosen.loss_in else ""
    what = f"{a.library}, {formatting.scaling_words(a.scaling)}, {a.method}, {steps}{_under(a)}{loss}"
    emulated = (
        " (emulated in software here: what it would do, not code to train with today)"
        if a.arithmetic == "emulated"
        else ""
    )
    why = _reason(chosen, device, manifest.get("device_details"), (timed or {}).get(a.dtype))
    return f"**Train with {a.dtype}**: {what}{emulated}. {why} {on}"


def _reason(
    chosen: choice.Choice, device: str | None, card: dict | None = None, timed: timed_cost.TimedCost | None = None
) -> str:
    j = chosen.answer.judgement
    parts = []
    if j.to_noise is not None:
        parts.append(
            f"its parameter-gradient roundoff is at most {formatting.in_u(j.to_noise.value)}× "
            f"{formatting.noise_at(j.noise_batch_size)} (safe for training up to {verdict.WELL_UNDER:g}×"
            f"{formatting.near(j.to_noise_near, j.noise_uncertainty)}{seed_words.spread_words(j)})"
        )
    else:
        parts.append(
            f"its parameter-gradient roundoff is at most {formatting.error(j.worst_grad)} ({j.label}; the gradient "
            "noise "
            "was not measured)"
        )
    if chosen.float32_grad and j.worst_grad is not None and chosen.answer.dtype.split()[0] != "float32":
        parts.append(
            f"{formatting.in_u(j.worst_grad / chosen.float32_grad)}× float32's ({formatting.error(j.worst_grad)} "
            "against "
            f"{formatting.error(chosen.float32_grad)})"
        )
    c = chosen.answer.cost
    lead = slower_first(chosen.answer, timed, device)
    if timed is not None and timed.time_ratio is not None:
        if not lead:
            parts.append(f"{_on_this(device)} at {timed.time_ratio.median:.2f}× float32's time")
    elif device is not None and str(device).startswith("cuda") and c is not None and c.time_ratio is not None:
        fast = card_words(chosen.answer.dtype.split()[0], card)
        parts.append(
            f"at {formatting.value_range(c.time_ratio, lambda v: f'{v:.2f}×')} float32's time"
            + (f", and {fast}" if fast else "")
        )
    lower = chosen.lower
    if lower is not None and lower.judgement.to_noise is not None:
        extra = " and ".join(_changes_beyond(lower, chosen.answer))
        parts.append(f"{extra} lowers it to {formatting.in_u(lower.judgement.to_noise.value)}×; not needed")
    r = chosen.runner_up
    if r is not None and (lower is None or r.judgement is not lower.judgement):
        noise = (
            f"{formatting.in_u(r.judgement.to_noise.value)}× the noise"
            + formatting.near(r.judgement.to_noise_near, r.judgement.noise_uncertainty)
            if r.judgement.to_noise
            else formatting.error(r.judgement.worst_grad)
        )
        parts.append(f"next best {r.dtype} ({r.judgement.label}, {noise})")
    return f"{lead}Why: {'; '.join(parts)}."


def slower_first(a: answer.Answer, timed: timed_cost.TimedCost | None, device: str | None) -> str:
    """Where the timing pass found the chosen low precision slower than float32 on this device, that first, in a
    sentence; else nothing."""
    if timed is None or timed.time_ratio is None or a.plain_float32 or timed.time_ratio.median <= 1:
        return ""
    detail = (
        f", {timed.repeats} repeats of {timed.method} at n_timesteps {timed.n_timesteps}, forward + backward"
        + seed_words.timed_on(timed.seed, ", ")
    )
    words = timed_ratio_words(a.dtype.split()[0], timed, detail)
    return f"{_on_this(device)[:1].upper()}{_on_this(device)[1:]} {words}: it does not pay in speed here. "


def _changes_beyond(other: choice.Alternative, chosen: answer.Answer) -> list[str]:
    """What setup `other` changes beyond the chosen one ("keeping `head` in float32", "`grad` loss scaling", "native
    in place of torchdiffeq", "forming the loss in float32, outside autocast"), in the order the choice weighs them."""
    j, than = other.judgement, chosen.judgement
    words = []
    if other.kept is not None and (chosen.kept is None or other.kept != chosen.kept.value):
        words.append(f"keeping {formatting.listing(f'`{p}`' for p in other.kept.split('+'))} in float32")
    if j.scaling != than.scaling:
        words.append(formatting.scaling_words(j.scaling) if scales(j.scaling) else "dropping the loss scaling")
    if j.library != than.library:
        words.append(f"{j.library} in place of {than.library}")
    if j.loss_in != than.loss_in:
        words.append(f"forming the loss {LOSS_WORDS.get(j.loss_in, f'in `{j.loss_in}`')}")
    if j.mode != than.mode:
        words.append(f"`{j.mode}`")
    return words


def judged_on(manifest: dict, rows: pd.DataFrame) -> str:
    """'Judged on the initial weights (seed 0, untrained) and synthetic data.'"""
    seed = ((manifest.get("model") or {}).get("options") or {}).get("seed", manifest.get("seed"))
    checkpoint = manifest.get("checkpoint")
    several = [c for c in manifest.get("checkpoints") or [] if isinstance(c, dict)]
    iterations = rows["train_iteration"].dropna().unique() if "train_iteration" in rows else []
    if several or isinstance(checkpoint, dict):
        name = rows["checkpoint"].iloc[0] if "checkpoint" in rows and rows["checkpoint"].notna().any() else None
        name = name or (checkpoint.get("path") if isinstance(checkpoint, dict) else None)
        at = f", iteration {int(iterations[0])}" if len(iterations) == 1 else ""
        weights = f"the trained weights of checkpoint `{name}`{at}"
    elif several_seeds(rows):
        weights = seed_words.judged_on_seeds(seeds_of(rows))
    elif "checkpoint" in manifest:
        weights = "the initial weights" + (f" (seed {seed}, untrained)" if seed is not None else " (untrained)")
    else:
        weights = "weights the manifest does not name"
    source = manifest.get("data_source")
    data = (
        "synthetic data"
        if is_synthetic(source)
        else f"the data {source}"
        if source
        else "data the manifest does not name"
    )
    return f"Judged on {weights} and {data}."


def answer_lines(
    results: pd.DataFrame, device: str | None, manifest: dict | None = None, timing: pd.DataFrame | None = None
) -> list[str]:
    """The terminal's form: the chosen setup (with what it was judged on, where the manifest says), per dtype its
    sentence, then its code lines indented."""
    rows, at = judged(results)
    found = answer.answers(rows)
    if not found:
        return []
    formats = format_search.format_results(rows, found)
    timed = timed_by_dtype(rows, found, timing)
    plain = lambda text: text.replace("**", "").replace("`", "")  # noqa: E731
    differs = seed_words.differs_first((f"{a.dtype} with {_setup(a)}", a.judgement) for a in found)
    first = differs + headline(rows, found, manifest or {}, device, timed)
    lines = [plain(at + (first if manifest else first.split(" Judged on ")[0]))]
    for a in per_dtype(found, formats):
        placement = placement_line(a)
        sentence = answer_sentence(a, device, (manifest or {}).get("device_details"), timed.get(a.dtype))
        lines.append(plain(f"{at}{sentence}{' ' + placement if placement else ''}"))
        measured = measured_model_code(manifest, results, a.judgement.judged_seed)
        lines += [f"    {line}" for line in code_lines(a, device, (manifest or {}).get("problem"), measured)]
    return lines + [plain(line) for line in format_search_terminal(rows, formats)]
