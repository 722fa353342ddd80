"""The user guide and the READMEs name only what exists: every option of a `roundoff` command, every axis
value, every config key, every module path and every file path they name is read from the code here.

`doc_problems(text)` lists what a page names that the code does not have; the tests run it over every page
and show, on planted mistakes, that it finds them.
"""

from __future__ import annotations

import fnmatch
import importlib
import importlib.machinery
import importlib.util
import re
import shlex
import tomllib
from functools import cache
from pathlib import Path

import pytest
import typer.main
from pydantic import BaseModel
from roundoff_cli.app import app

from roundoff_analyzer.axes.names import LIBRARY_ENTRY_POINTS
from roundoff_analyzer.axes.scaler_settings import ScalerSettings
from roundoff_analyzer.core.registry import Registry
from roundoff_analyzer.planning.config import SlurmSettings, SweepConfig, axis_registry
from roundoff_analyzer.training.config import MASTER_WEIGHTS, SetupEntry, TrainConfig

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md", ROOT / "reports" / "README.md"]

# Options of other programs that the pages name in prose (sbatch's, pip's, pytest's), never of `roundoff`.
OTHER_PROGRAMS_OPTIONS = {
    "--index-url",
    "--no-deps",
    "--strict",
    "--partition",
    "--gpus-per-task",
    "--time",
    "--cpus-per-task",
}
# Words after a `roundoff` option that stand for a value rather than being one.
_PLACEHOLDER = re.compile(r".*([<>…]|\.\.\.|[A-Z]{1,}$|^[A-Z]).*|.*[:/].*")
# Top folders of the repository: a backticked path under one of them must exist.
_TOP_FOLDERS = ("roundoff_analyzer", "cli", "tests", "configs", "bench", "examples", "reports", "docs")
_PATH = re.compile(rf"^(?:{'|'.join(_TOP_FOLDERS)})/[\w./-]*$")
_MODULE_PATH = re.compile(r"\broundoff_analyzer(?:\.[A-Za-z_]\w*)+")
_FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
_INLINE = re.compile(r"`([^`\n]+(?:\n[^`\n]+)?)`")
_OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
_AXIS_OPTIONS = {
    "--dtype": "dtype",
    "--library": "library",
    "--scaling": "scaling",
    "--method": "method",
    "--mode": "mode",
    "--arithmetic": "arithmetic",
    "--rounding": "rounding",
    "--loss-in": "loss_in",
}
# Options that take a file as `path/to/file.py:name` (checked when the file is in this repository).
_FILE_OPTIONS = {"--model", "-m", "--library", "--optimizer"}
_STATED_DEFAULT = re.compile(r"`(--[a-z][a-z0-9-]*)`(?:, default |, | \(|, default\s)(\d[\d.]*(?:e[+-]?\d+)?)\b")
# Documents a reader of the repository does not have: a source file of the project's planning, an issue number, a
# folder beside the checkout. A page says what the thing is instead.
_OUTSIDE_DOCUMENT = re.compile(r"\bseed 0\d\d\b|\bSPEC\b|\b[Ii]ssue #?\d+")
# A relative path that climbs folders ("../x"), in a link or in prose; "..." (an elision) is not one.
_PARENT_PATH = re.compile(r"(?<![.\w])(?:\.\./)+[\w.\-/]*")
# A file and a class it defines, named together: "`roundoff_analyzer/x/y.py`, `ClassName`".
_FILE_AND_NAME = re.compile(r"`((?:roundoff_analyzer|cli|bench|tests)/[\w/]+\.py)`, `([A-Z]\w*)`")
_SEPARATORS = {"&&", "||", "|", ";", ">", "2>&1"}


@cache
def cli_options() -> dict[str, set[str]]:
    """Each `roundoff` command's options (short and long), and under "" the application's own."""
    group = typer.main.get_command(app)
    options = {"": {opt for param in group.params for opt in (*param.opts, *param.secondary_opts)} | {"--help"}}
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        opts = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
        options[name] = {opt for opt in opts if opt.startswith("-")} | {"--help"}
    return options


@cache
def bench_options() -> dict[str, set[str]]:
    """Each script's options in bench/ (`bench/NAME.py` -> its options), read from its argparse calls."""
    scripts = {}
    for script in sorted((ROOT / "bench").glob("*.py")):
        calls = re.findall(r"add_argument\(([^)]*)", script.read_text(encoding="utf-8"))
        names = {opt for call in calls for opt in re.findall(r"\"(-{1,2}[a-z][a-z0-9-]*)\"", call)}
        scripts[f"bench/{script.name}"] = names
    return scripts


def _bench_problems(span: str) -> list[str]:
    """Options given to a bench script (`python bench/NAME.py --x`) that it does not take."""
    match = re.match(r"python (bench/\w+\.py)\b(.*)", span)
    if match is None:
        return []
    script, arguments = match.groups()
    if script not in bench_options():
        return [f"{script} does not exist"]
    return [f"{script} has no option {opt}" for opt in _OPTION.findall(arguments) if opt not in bench_options()[script]]


def _training_axis(axis: str) -> Registry:
    from roundoff_analyzer.training.optimizers import OPTIMIZERS
    from roundoff_analyzer.training.updates import UPDATES

    registries: dict[str, Registry] = {"update": UPDATES, "optimizer": OPTIMIZERS}
    return registries[axis]


def _value_known(option: str, value: str) -> bool:
    """Whether `value` is a value of the axis that `option` names (True for options that name no axis)."""
    if option == "--weights":
        return value == MASTER_WEIGHTS or value in axis_registry("dtype")
    if option in {"--update", "--optimizer"}:
        return value in _training_axis(option[2:])
    if option == "--executor":
        from roundoff_analyzer.execution.executors import EXECUTORS

        return value in EXECUTORS
    if option in {"--model", "-m"}:
        from roundoff_analyzer.axes.models import MODELS

        return value in MODELS
    axis = _AXIS_OPTIONS.get(option)
    if axis is None:
        return True
    if axis == "library":
        from roundoff_analyzer.axes.libraries import MISSING_LIBRARIES

        return value in axis_registry(axis) or value in MISSING_LIBRARIES
    return value in axis_registry(axis)


def _tokens(command: str) -> list[str]:
    try:
        return shlex.split(command, comments=True)
    except ValueError:  # an unclosed quote in a shortened example
        return command.split()


def command_problems(command: str) -> list[str]:
    """What a line of shell names for `roundoff` that its options or axes do not have."""
    options, problems = cli_options(), []
    tokens = _tokens(command.replace("\\\n", " "))
    starts = [i for i, token in enumerate(tokens) if token == "roundoff"]
    for start in starts:
        rest = tokens[start + 1 :]
        name = rest[0] if rest and rest[0] and rest[0] in options else ""
        known = options[name]
        words = rest[1:] if name else rest
        model, option_keys = None, []
        for i, word in enumerate(words):
            if word in _SEPARATORS or word == "roundoff":
                break
            if not re.fullmatch(r"--?[a-z][a-z0-9-]*(=.*)?", word):
                continue
            option, _, attached = word.partition("=")
            if option not in known:
                problems.append(f"`roundoff {name}` has no option {option}")
                continue
            value = attached or (words[i + 1] if i + 1 < len(words) else "")
            if value.startswith("-") or value in _SEPARATORS:
                continue
            if option in {"--model", "-m"}:
                model = value
            elif option in {"--config", "-c"} and (ROOT / value).is_file():
                model = tomllib.loads((ROOT / value).read_text(encoding="utf-8")).get("model", model)
            elif option in {"--option", "-o"}:
                option_keys.append(value.partition("=")[0])
                continue
            for part in value.split(","):
                file = part.partition(":")[0]
                if option in _FILE_OPTIONS and _PATH.match(file) and not (ROOT / file).exists():
                    problems.append(f"{option} {part}: {file} does not exist")
                elif part and not _PLACEHOLDER.fullmatch(part) and not _value_known(option, part):
                    problems.append(f"{option} {part}: no such value")
        problems += _model_option_problems(model, option_keys)
    return problems


def _model_option_problems(model: str | None, keys: list[str]) -> list[str]:
    """Options (`-o key=value`, `[options]`) that a built-in model does not take."""
    from roundoff_analyzer.axes.models import MODELS

    if model is None or model not in MODELS:
        return []  # a user's factory, or no model named
    fields = MODELS.get(model).options_type.model_fields
    return [f"model {model} has no option '{key}'" for key in keys if key not in fields]


def _config_problems(toml_text: str) -> list[str]:
    """Keys of a sweep or training config file that neither schema has."""
    try:
        values = tomllib.loads(toml_text)
    except tomllib.TOMLDecodeError:
        return []  # a fragment with placeholders, not a whole file
    problems = []
    top = set(SweepConfig.model_fields) | set(TrainConfig.model_fields)
    nested: dict[str, type[BaseModel]] = {"scaler": ScalerSettings, "slurm": SlurmSettings, "setups": SetupEntry}
    problems += _model_option_problems(values.get("model"), list(values.get("options", {})))
    for key, value in values.items():
        if key not in top:
            problems.append(f"config key '{key}' is in neither the sweep's nor the training's config")
        elif key in nested:
            for entry in value if isinstance(value, list) else [value]:
                for inner in entry:
                    if inner not in nested[key].model_fields:
                        problems.append(f"config key '{key}.{inner}' does not exist")
    return problems


def _module_problems(text: str) -> list[str]:
    """Module paths (`roundoff_analyzer.x.y`, or an attribute of a module) that do not resolve."""
    problems = []
    for path in sorted(set(_MODULE_PATH.findall(text)) - {LIBRARY_ENTRY_POINTS}):
        parts = path.split(".")
        # The longest prefix that is a module; what follows it must be an attribute of it.
        for end in range(len(parts), 0, -1):
            if _find_spec_safely(".".join(parts[:end])) is not None:
                break
        target: object = importlib.import_module(".".join(parts[:end]))
        for attribute in parts[end:]:
            if not hasattr(target, attribute):
                problems.append(f"{path}: {'.'.join(parts[:end])} has no {attribute}")
                break
            target = getattr(target, attribute)
    return problems


def _find_spec_safely(name: str) -> importlib.machinery.ModuleSpec | None:
    try:
        return importlib.util.find_spec(name)
    except ModuleNotFoundError:
        return None


def _default_of(option: str) -> object:
    """The default of the config field an option sets (None where no config field has its name)."""
    field = option.removeprefix("--").replace("-", "_")
    for schema in (SweepConfig, ScalerSettings, TrainConfig):
        if field in schema.model_fields:
            return schema.model_fields[field].default
    return None


def _default_problems(text: str) -> list[str]:
    """Defaults stated beside an option (`--max-retries` (30), `--rtol`, default 1e-3) that its config field lacks."""
    problems = []
    for option, value in _STATED_DEFAULT.findall(text):
        default = _default_of(option)
        if isinstance(default, (int, float)) and not isinstance(default, bool) and float(value) != default:
            problems.append(f"{option} defaults to {default:g}, not {value}")
    return problems


@cache
def extras() -> set[str]:
    """The optional dependencies' names in pyproject.toml."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return set(pyproject["project"]["optional-dependencies"])


def _install_problems(text: str) -> list[str]:
    """This package installs from its checkout (it is on no package index), with extras that pyproject.toml has."""
    problems = [
        f"{line!r}: roundoff-analyzer is on no package index"
        for line in re.findall(r"pip install (?:-[\w-]+ )*\"?roundoff-analyzer\b[^\n`]*", text)
    ]
    for group in re.findall(r"pip install -e \"?\.\[([\w,-]+)\]", text):
        problems += [f"pyproject.toml has no extra '{extra}'" for extra in group.split(",") if extra not in extras()]
    # What the guide installs is what CI tested: the checkout with the lock (docs/ci.md#versions).
    for line in re.findall(r"pip install -e \"?\.\[[\w,-]+\]\"?[^\n`&]*", text):
        if "-c constraints.txt" not in line:
            problems.append(f"{line.strip()!r} installs without the lock (-c constraints.txt)")
    return problems


def _outside_path_problems(text: str, folder: Path) -> list[str]:
    """Relative paths of `text` that leave the repository or name nothing in it, read from `folder`: a user's clone
    has nothing beside it."""
    problems = []
    for path in _PARENT_PATH.findall(text):
        target = (folder / path).resolve()
        if not target.is_relative_to(ROOT) or not target.exists():
            problems.append(f"{path!r} leaves the repository or names nothing in it")
    return problems


def doc_problems(text: str, folder: Path = ROOT) -> list[str]:
    """Everything `text` (a markdown page in `folder`) names that the code or the repository does not have, one
    line each."""
    problems: list[str] = []
    all_options = set().union(*cli_options().values(), *bench_options().values(), OTHER_PROGRAMS_OPTIONS)
    fenced = _FENCE.findall(text)
    prose = _FENCE.sub("", text)
    for language, block in fenced:
        problems += [problem for line in block.splitlines() for problem in _bench_problems(line.strip())]
        if language == "toml" and "pyproject.toml" not in block:  # a package's metadata, not a config file
            problems += _config_problems(block)
        elif language in {"", "bash", "sh", "console", "shell"}:
            problems += command_problems(block)
    for match in _INLINE.finditer(prose):
        span = match.group(1).replace("\n", " ")
        # A path written as another project's (torchdiffeq's `examples/cnf.py`) is in that project.
        theirs = prose[: match.start()].endswith("'s ")
        if re.match(r"^(\$ )?roundoff\b", span):
            problems += command_problems(span.removeprefix("$ "))
        elif span.startswith("python bench/"):
            problems += _bench_problems(span)
        elif not re.match(r"^(pip|python3?|pytest|ruff|mypy|sbatch|mkdocs|git|srun|uv)\b", span):
            unknown = [opt for opt in _OPTION.findall(span) if opt not in all_options]
            problems += [f"no `roundoff` command has {opt}" for opt in unknown]
        if _PATH.match(span) and not theirs and not any(mark in span for mark in "<*{") and not (ROOT / span).exists():
            problems.append(f"{span} does not exist")
    problems += _module_problems(text)
    top = set(SweepConfig.model_fields) | set(TrainConfig.model_fields)
    problems += [
        f"config key '{key}' does not exist" for key in re.findall(r"config key `(\w+)`", text) if key not in top
    ]
    for path, name in _FILE_AND_NAME.findall(text):
        if (ROOT / path).is_file() and not re.search(
            rf"^(class|def) {name}\b|^{name} =", (ROOT / path).read_text(), re.M
        ):
            problems.append(f"{path} defines no {name}")
    problems += _default_problems(text)
    problems += _install_problems(text)
    problems += [f"{name!r} names a document outside the repository" for name in _OUTSIDE_DOCUMENT.findall(text)]
    problems += _outside_path_problems(text, folder)
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_a_page_names_only_what_exists(page: Path) -> None:
    assert doc_problems(page.read_text(encoding="utf-8"), page.parent) == []


def test_a_wrong_option_is_caught() -> None:
    page = "Run\n\n```bash\nroundoff sweep --model otflow --no-such-option 3\n```\n\nor `roundoff check DIR --nope`."
    assert doc_problems(page) == [
        "`roundoff sweep` has no option --no-such-option",
        "`roundoff check` has no option --nope",
    ]
    assert doc_problems("Give `--no-such-option` to any command.") == ["no `roundoff` command has --no-such-option"]


def test_a_wrong_axis_value_is_caught() -> None:
    text = "`roundoff sweep --model otflow --dtype float16,float12 --library native --scaling dynamc`"
    assert doc_problems(text) == ["--dtype float12: no such value", "--scaling dynamc: no such value"]
    assert doc_problems("`roundoff sweep --dtype e4m3,e5m10 --method rk4`") == []  # a family's names are values
    assert doc_problems("`roundoff sweep -m otflow -o alpha=1,2,3 -o widht=8`") == [
        "model otflow has no option 'widht'"
    ]


def test_a_wrong_config_key_is_caught() -> None:
    assert doc_problems("(`--allow-oom`, config key `allow_om`)") == ["config key 'allow_om' does not exist"]
    page = '```toml\nmodel = "otflow"\ntimestep = [8]\n\n[scaler]\ninit_scale = 1024\nretries = 3\n```\n'
    assert doc_problems(page) == [
        "config key 'timestep' is in neither the sweep's nor the training's config",
        "config key 'scaler.retries' does not exist",
    ]


def test_a_wrong_module_or_file_path_is_caught() -> None:
    text = "Import `roundoff_analyzer.solvers.odeint`; see roundoff_analyzer.grid and `roundoff_analyzer/no_such.py`."
    problems = doc_problems(text)
    assert problems == [
        "roundoff_analyzer/no_such.py does not exist",
        "roundoff_analyzer.grid: roundoff_analyzer has no grid",
    ]
    assert doc_problems("`roundoff sweep --model examples/gone.py:factory`") == [
        "--model examples/gone.py:factory: examples/gone.py does not exist"
    ]
    assert doc_problems("torchdiffeq's `examples/cnf.py`") == []
    assert doc_problems("(`roundoff_analyzer/core/registry.py`, `Register`)") == [
        "roundoff_analyzer/core/registry.py defines no Register"
    ]


def test_a_wrong_default_is_caught() -> None:
    text = "at most `--max-retries` (12) times; `--rtol`, default 1e-3; `--atol`, 1e-5; `--init-scale` (65536)"
    assert doc_problems(text) == ["--max-retries defaults to 30, not 12", "--atol defaults to 1e-06, not 1e-5"]


def test_check_matches_on_the_columns_the_guide_names() -> None:
    from roundoff_analyzer.judging import check

    page = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
    columns = re.search(r"configuration by configuration \(on the columns ([^)]*)\)", page)
    errors = re.search(r"one of its errors \(([^)]*)\)", page)
    assert columns is not None and errors is not None
    assert re.findall(r"`(\w+)`", columns.group(1)) == list(check.CONFIG_COLUMNS)
    assert re.findall(r"`(\w+)`", errors.group(1)) == list(check.ERROR_METRICS)


def test_the_slurm_time_forms_the_guide_names_are_the_ones_accepted() -> None:
    from roundoff_analyzer.planning.config import SLURM_TIME_FORMS

    assert SLURM_TIME_FORMS in (ROOT / "docs" / "parallel.md").read_text(encoding="utf-8")
    forms = re.split(r", | or ", SLURM_TIME_FORMS)
    examples = ["90" if form == "minutes" else re.sub(r"[A-Z]", "1", form) for form in forms]
    assert [SlurmSettings.model_validate({"time": example}).time for example in examples] == examples


def test_an_install_from_an_index_or_a_wrong_extra_is_caught() -> None:
    text = 'Run `pip install "roundoff-analyzer[slurm]"` or `pip install -e ".[slurm,gpu]"`.'
    assert doc_problems(text) == [
        "'pip install \"roundoff-analyzer[slurm]\"': roundoff-analyzer is on no package index",
        "pyproject.toml has no extra 'gpu'",
        "'pip install -e \".[slurm,gpu]\"' installs without the lock (-c constraints.txt)",
    ]
    assert doc_problems('`pip install -e ".[slurm]" -c constraints.txt`') == []


def test_a_document_outside_the_repository_is_caught() -> None:
    text = "As seed 000 reports (SPEC section 4, issue #15), take the wheel from ../wheels beside the checkout."
    assert doc_problems(text) == [
        *(f"{name!r} names a document outside the repository" for name in ("seed 000", "SPEC", "issue #15")),
        "'../wheels' leaves the repository or names nothing in it",
    ]
    # Inside the repository, a climb to a file it has is fine; to one it lacks is not.
    assert doc_problems("[the guide](../docs/index.md)", ROOT / "reports") == []
    assert doc_problems("[gone](../docs/nowhere.md)", ROOT / "reports") == [
        "'../docs/nowhere.md' leaves the repository or names nothing in it"
    ]


def _quoted_pieces(page: str) -> list[tuple[str, str]]:
    """(report path, quoted piece) for each block quote that follows a line naming a committed report.md."""
    pieces = []
    for intro, quote in re.findall(r"`(reports/[\w./-]+/report\.md)`[^\n]*\n\n?((?:>[^\n]*\n)+)", page):
        text = re.sub(r"^> ?", "", quote, flags=re.MULTILINE)
        for paragraph in re.split(r"\n\s*\n|\n- ", text):
            for piece in re.split(r"\s*…\s*", " ".join(paragraph.split()).removeprefix("- ")):
                if piece:
                    pieces.append((intro, piece))
    return pieces


def test_the_readme_quotes_its_report_word_for_word() -> None:
    pieces = _quoted_pieces((ROOT / "README.md").read_text(encoding="utf-8"))
    assert len(pieces) >= 4
    for report, piece in pieces:
        text = (ROOT / report).read_text(encoding="utf-8")
        if re.fullmatch(r"\w+:", piece):  # a section's name, standing for its heading
            assert f"\n## {piece[:-1]}\n" in text, (report, piece)
        else:
            assert piece in " ".join(text.split()), (report, piece)


def _table_rows(page: str) -> list[list[str]]:
    """The cells of every markdown table row of `page` (header and rule rows included)."""
    return [
        [cell.strip() for cell in line.strip().strip("|").split(" | ")]
        for line in page.splitlines()
        if line.startswith("| ")
    ]


def test_the_failure_classes_table_has_one_row_per_class_in_its_records_words() -> None:
    from roundoff_analyzer.measuring.failures import FAILURE_KINDS

    rows = _table_rows((ROOT / "docs" / "failures.md").read_text(encoding="utf-8"))
    listed = {match.group(1): row[1:] for row in rows if (match := re.fullmatch(r"`(\w+)`", row[0]))}
    assert list(listed) == [str(failure_class) for failure_class in FAILURE_KINDS]
    for failure_class, kind in FAILURE_KINDS.items():
        assert listed[failure_class] == [kind.when, kind.remedy], failure_class


@pytest.mark.parametrize("axis", ["method", "dtype", "scaling", "mode", "loss_in", "arithmetic", "rounding", "library"])
def test_the_axes_table_lists_every_value_of_an_axis_and_no_other(axis: str) -> None:
    from roundoff_analyzer.axes.libraries import MISSING_LIBRARIES

    rows = _table_rows((ROOT / "docs" / "axes.md").read_text(encoding="utf-8"))
    values = next(row[1] for row in rows if row[0] == axis)  # the first table: one row per axis
    listed = set(re.findall(r"`([\w-]+)`", values)) - {"eXmY"}  # the family of emulated formats, not one name
    registry = axis_registry(axis)
    registered = set(registry.names()) | (set(MISSING_LIBRARIES.names()) if axis == "library" else set())
    assert listed == registered


def test_the_libraries_table_lists_the_methods_each_installed_library_runs() -> None:
    from roundoff_analyzer.axes.libraries import LIBRARIES
    from roundoff_analyzer.axes.methods import METHODS

    page = (ROOT / "docs" / "axes.md").read_text(encoding="utf-8")
    rows = {row[0].strip("`"): row for row in _table_rows(page) if len(row) == 4 and row[0].startswith("`")}
    fixed_grid = {method.name for method in METHODS if not method.adaptive}
    for library in LIBRARIES:
        methods = rows[library.name][2]
        if methods.startswith("as "):  # as another library of the table
            methods = rows[methods.removeprefix("as ").strip("`")][2]
        listed = set(re.findall(r"`(\w+)`", methods))
        if "every fixed-grid method" in methods or "the other fixed-grid methods" in methods:
            listed |= fixed_grid
        runs = {method.name for method in METHODS if library.unsupported_method_reason(method) is None}
        assert listed == runs, library.name


def test_the_results_columns_paragraph_names_every_column_and_no_other() -> None:
    from roundoff_analyzer.axes.libraries import MISSING_LIBRARIES
    from roundoff_analyzer.storage.result_schemas import RESULT_SCHEMA

    page = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    paragraph = page[page.index("Columns of `results.parquet`") : page.index("## Interrupted sweeps")]
    words = {word.strip() for span in re.findall(r"`([^`]+)`", paragraph) for word in span.split(",")}
    named = {word for word in words if re.fullmatch(r"[a-z0-9_*]+", word)}
    axes = ["method", "dtype", "scaling", "mode", "loss_in", "arithmetic", "rounding", "library"]
    values = {"ok", "failed", "skipped", "none", *MISSING_LIBRARIES.names()}
    values |= {name for axis in axes for name in axis_registry(axis).names()}

    def is_named(column: str) -> bool:
        return any(fnmatch.fnmatch(column, word) or (word.startswith("_") and column.endswith(word)) for word in named)

    assert [column for column in RESULT_SCHEMA.names if not is_named(column)] == []
    columns = set(RESULT_SCHEMA.names)
    not_columns = [
        word for word in named - values if "*" not in word and not word.startswith("_") and word not in columns
    ]
    assert not_columns == []


def test_an_option_renamed_in_a_copy_of_a_real_page_is_caught(tmp_path: Path) -> None:
    page = (ROOT / "docs" / "parallel.md").read_text(encoding="utf-8")
    assert "--slurm-time 30" in page and doc_problems(page) == []
    copy = tmp_path / "parallel.md"
    copy.write_text(page.replace("--slurm-time 30", "--slurm-timelimit 30"), encoding="utf-8")
    assert doc_problems(copy.read_text(encoding="utf-8")) == ["`roundoff sweep` has no option --slurm-timelimit"]


def test_every_number_the_reports_index_gives_is_in_the_report_it_describes() -> None:
    page = (ROOT / "reports" / "README.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| \[`[\w-]+/`\]\(([^)]+)\) \| (.*) \| `[^|]*` \|$", page, re.M)
    assert len(rows) >= 8
    for report, shows in rows:
        text = " ".join((ROOT / "reports" / report).read_text(encoding="utf-8").split())
        numbers = re.findall(r"(?<![\w.])[-+−]?\d+(?:\.\d+)?(?:e[-+]\d+)?(?: ?[×%u]| MiB)?", shows)
        assert [number for number in numbers if number not in text] == [], report


def test_every_module_the_reports_index_names_is_named_in_the_report_it_describes() -> None:
    page = (ROOT / "reports" / "README.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| \[`[\w-]+/`\]\(([^)]+)\) \| (.*) \| `[^|]*` \|$", page, re.M)
    named = 0
    for report, shows in rows:
        text = (ROOT / "reports" / report).read_text(encoding="utf-8")
        dotted = [
            n for n in re.findall(r"`(\w+(?:\.\w+)+)`", shows) if not re.search(r"\.(md|py|toml|json|sha256)$", n)
        ]
        named += len(dotted)
        assert [name for name in dotted if f"`{name}`" not in text and f" {name} " not in text] == [], report
    assert named >= 2


def test_where_the_reports_index_says_an_overflow_began_is_where_its_reports_tables_say() -> None:
    """'Unscaled native runs overflow first at backward step 0, in `potential.layers.0` (n_timesteps 8) and in
    `potential` (n_timesteps 32, 128)' (or 'in the vector field's own code'): every failed unscaled run of that
    library (keeping nothing in float32) at those n_timesteps, read from its folder's tables by the report's own
    rule."""
    import pandas as pd

    from roundoff_analyzer.measuring.columns import VECTOR_FIELD
    from roundoff_analyzer.report.sections.per_module import origin, rows_of

    page = (ROOT / "reports" / "README.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| \[`([\w-]+)/`\]\([^)]+\) \| (.*) \| `[^|]*` \|$", page, re.M)
    place = r"in (`[\w.]+`|the vector field's own code) \(n_timesteps ([\d, ]+)\)"
    any_place = place.replace("(", "(?:").replace("\\(?:", "\\(")
    claims = [
        (folder, library, phase, int(step), where, int(n))
        for folder, shows in rows
        for library, phase, step, said_places in re.findall(
            rf"Unscaled ([\w-]+) runs overflow first at (\w+) step (\d+), ({any_place}(?: and {any_place})*)", shows
        )
        for where, ns in re.findall(place, said_places)
        for n in ns.split(", ")
    ]
    assert claims, "the index says where an overflow began"
    folders = {claim[0] for claim in claims}
    for folder in folders:
        results, modules = (pd.read_parquet(ROOT / "reports" / folder / f"{t}.parquet") for t in ("results", "modules"))
        for _, library, phase, step, where, n in [claim for claim in claims if claim[0] == folder]:
            runs = results[
                (results["library"] == library)
                & (results["scaling"] == "none")
                & (results["keep_float32"] == "none")
                & (results["status"] == "failed")
                & (results["n_timesteps"] == n)
            ]
            module = VECTOR_FIELD if where.startswith("the vector") else where.strip("`")
            found = [origin(rows_of(modules, run)) for _, run in runs.iterrows()]
            assert found and all(
                o is not None and (o.module, o.phase, o.step) == (module, phase, step) for o in found
            ), (
                folder,
                n,
                found,
            )
        failed = results[
            (results["scaling"] == "none") & (results["keep_float32"] == "none") & (results["status"] == "failed")
        ]
        said = {(claim[1], claim[5]) for claim in claims if claim[0] == folder}
        assert {
            (run.library, run.n_timesteps) for run in failed.itertuples() if run.library in {s[0] for s in said}
        } == said


def test_the_readme_layout_table_names_folders_and_files_that_exist() -> None:
    page = (ROOT / "README.md").read_text(encoding="utf-8")
    section = page[page.index("## Where things are") : page.index("## User guide")]
    package = ROOT / "roundoff_analyzer"
    rows = [row for row in _table_rows(section) if row[0].startswith("`")]
    assert len(rows) >= 10
    missing = []
    for row in rows:
        folder = package / row[0].strip("`")
        assert folder.exists(), row[0]
        for name in re.findall(r"`([\w/]+(?:/|\.py))`", " ".join(row[1:])):
            if not any((base / name).exists() for base in (folder, package, package / "axes")):
                missing.append(f"{row[0]}: {name}")
    assert missing == []


def _axis_table_problems(page: str) -> list[str]:
    """First-column values of a table headed by an axis name (`| scaling | ... |`) that the axis does not have."""
    problems, axis = [], None
    for line in page.splitlines():
        if not line.startswith("| "):
            axis = None
            continue
        first = line.strip().strip("|").split(" | ")[0].strip()
        if axis is None:
            axis = first.strip("`") if first.strip("`") in _TABLE_AXES else ""
        elif axis and not first.startswith("---"):
            for value in re.findall(r"^`([\w-]+)`", first):
                if not _PLACEHOLDER.fullmatch(value) and not _value_known(_TABLE_AXES[axis], value):
                    problems.append(f"{axis} {value}: no such value")
    return problems


_TABLE_AXES = {
    **{option.removeprefix("--").replace("-", "_"): option for option in _AXIS_OPTIONS},
    "executor": "--executor",
}


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_a_table_of_axis_values_lists_only_values_of_that_axis(page: Path) -> None:
    assert _axis_table_problems(page.read_text(encoding="utf-8")) == []


def test_a_wrong_value_in_a_table_of_axis_values_is_caught() -> None:
    table = "| scaling | backward |\n| --- | --- |\n| `none` | plain |\n| `loss` | wrong |\n\n| x |\n| --- |\n| `y` |\n"
    assert _axis_table_problems(table) == ["scaling loss: no such value"]


@pytest.mark.parametrize(("command", "page"), [("sweep", "results.md"), ("train", "training.md")])
def test_the_guide_gives_the_default_folder_that_help_gives(command: str, page: str) -> None:
    click_command = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    (out,) = [param for param in click_command.params if "--out" in param.opts]
    assert isinstance(out.show_default, str) and out.show_default.startswith("results/")
    assert f"`{out.show_default}`" in (ROOT / "docs" / page).read_text(encoding="utf-8")
