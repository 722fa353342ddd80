"""The checkpoint axis: `--checkpoint` over a `roundoff train` folder (or a comma list) runs the grid once per
checkpoint, each against its own float64 reference, and the report follows the errors along training.

The train folder is written here as `roundoff train` writes one (the on-disk contract): a tiny CNF's state dicts,
each iteration's weights scaled and perturbed differently, with their sidecar JSON, the train manifest and a
training summary.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import shutil
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
import torch
from matplotlib.image import imread

from roundoff_analyzer import api
from roundoff_analyzer.api import load
from roundoff_analyzer.axes.models import MODELS, parse_options
from roundoff_analyzer.execution import engine
from roundoff_analyzer.judging.check import compare
from roundoff_analyzer.planning import config
from roundoff_analyzer.report.along_training_findings import ALONG_TRAINING, last_checkpoint, trends
from roundoff_analyzer.report.checkpoint_scope import scope_note

from .conftest import WIDE_TABLES, as_written_before_content_hashes, results, run_cli
from .test_parallel import result_columns_except_cost
from .test_resume import shards

TINY_CNF = {"hidden": "8", "width": "8", "batch": "16"}
TINY_CNF_ARGS = [arg for key, value in TINY_CNF.items() for arg in ("-o", f"{key}={value}")]
ITERATIONS = (0, 10, 20)
# float16 on both libraries without scaling, rk4 at 4 and 8 steps: 4 configurations per checkpoint.
GRID = [
    "--timesteps",
    "4,8",
    "--method",
    "rk4",
    "--dtype",
    "float16",
    "--library",
    "native,torchdiffeq",
    "--scaling",
    "none",
    "--noise-batches",
    "4",
    "--device",
    "cpu",
]
PER_CHECKPOINT = 4
SUMMARY = pd.DataFrame(
    {
        "setup": ["float32", "float16-native-dynamic"],
        "library": ["native", "native"],
        "dtype": ["float32", "float16"],
        "scaling": ["none", "dynamic"],
        "iterations": [20, 20],
        "final_loss": [2.5, 2.52],
        "final_val_loss": [2.61, 2.6361],
        "val_loss_rel_to_reference": [0.0, 0.0099616858],
        "time_per_iter_s": [0.1, 0.12],
        "peak_memory_bytes": [None, None],
    }
)


def write_train_folder(root: Path, iterations=ITERATIONS) -> Path:
    """A train folder per the contract: checkpoints/iter_<7 digits>.pt (the ODE function's state dict) and .json."""
    spec = MODELS.get("cnf")
    problem = spec.build(parse_options(spec, TINY_CNF), torch.device("cpu"))
    (root / "checkpoints").mkdir(parents=True)
    for k, iteration in enumerate(iterations):
        generator = torch.Generator().manual_seed(iteration)
        # Weights that grow as training goes on, as trained weights do: errors then differ from checkpoint to
        # checkpoint.
        state = {
            name: value * 3.0**k + 0.1 * torch.randn(value.shape, generator=generator)
            for name, value in problem.func.state_dict().items()
        }
        stem = root / "checkpoints" / f"iter_{iteration:07d}"
        torch.save(state, stem.with_suffix(".pt"))
        sidecar = {
            "iteration": iteration,
            "loss": 3.0 - 0.01 * iteration,
            "model": "cnf",
            "options": TINY_CNF,
            "seed": 0,
            "data": None,
            "setup": "float32",
        }
        stem.with_suffix(".json").write_text(json.dumps(sidecar))
    manifest = {
        "kind": "roundoff-train",
        "model": "cnf",
        "options": TINY_CNF,
        "seed": 0,
        "data": None,
        "iters": max(iterations),
        "save_at": list(iterations),
        "setups": [
            {
                "label": "float32",
                "library": "native",
                "method": "rk4",
                "n_timesteps": 8,
                "dtype": "float32",
                "scaling": "none",
                "mode": "autocast",
                "folder": ".",
            }
        ],
    }
    (root / "train_manifest.json").write_text(json.dumps(manifest))
    SUMMARY.to_parquet(root / "training_summary.parquet")
    return root


@pytest.fixture(scope="module")
def train_folder(tmp_path_factory) -> Path:
    return write_train_folder(tmp_path_factory.mktemp("train") / "cnf_train")


@pytest.fixture(scope="module")
def along(train_folder, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("along") / "sweep"
    result = run_cli("sweep", "--model", "cnf", *TINY_CNF_ARGS, *GRID, "--checkpoint", train_folder, "--out", out)
    assert result.exit_code == 0, result.output
    return out


def test_every_checkpoint_of_the_folder_runs_the_grid_in_iteration_order(along, train_folder):
    table = results(along)
    names = [f"cnf_train/iter_{i:07d}" for i in ITERATIONS]
    assert len(table) == PER_CHECKPOINT * len(ITERATIONS)
    assert list(table["checkpoint"].drop_duplicates()) == names
    assert table.groupby("checkpoint")["train_iteration"].unique().map(list).to_dict() == {
        n: [i] for n, i in zip(names, ITERATIONS)
    }
    assert str(table["train_iteration"].dtype) == "int64"
    assert (table["status"] == "ok").all()
    # The same grid at each checkpoint; the shard of each configuration names its checkpoint.
    grid = ["library", "method", "n_timesteps", "dtype", "scaling"]
    assert all(
        (g[grid].values == table[table.checkpoint == names[0]][grid].values).all()
        for _, g in table.groupby("checkpoint")
    )
    assert len(shards(along)) == len(table) and all("-ckpt-cnf_train_iter_" in p.name for p in shards(along))

    manifest = json.loads((along / "manifest.json").read_text())
    listed = manifest["checkpoints"]
    assert [c["name"] for c in listed] == names and [c["iteration"] for c in listed] == list(ITERATIONS)
    for record, iteration in zip(listed, ITERATIONS):
        path = train_folder / "checkpoints" / f"iter_{iteration:07d}.pt"
        assert record["path"] == str(path.resolve())
        assert record["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert [c["sha256"] for c in manifest["fingerprint"]["checkpoints"]] == [c["sha256"] for c in listed]
    # Each checkpoint's fine reference and gradient noise are its own; the finished sweep removed the saved pieces.
    assert table.groupby("checkpoint")["grad_noise_rel"].nunique().eq(1).all() and table[
        "grad_noise_rel"
    ].nunique() == len(names)
    assert not (along / "yardsticks").exists()


def test_each_checkpoint_has_its_own_references(along):
    """Rows at different checkpoints differ: the float64 references (and the fine reference and noise) are each
    checkpoint's."""
    table = results(along).set_index(["library", "n_timesteps", "checkpoint"])
    for column in ("grad_params_rel_err", "disc_grad_params_rel_err", "grad_noise_rel", "reference_max_abs_adjoint"):
        per_checkpoint = table[column].unstack("checkpoint")
        assert per_checkpoint.notna().all().all(), column
        assert (per_checkpoint.nunique(axis=1) == len(ITERATIONS)).all(), column


def test_first_checkpoint_equals_a_sweep_of_that_file_alone_bit_for_bit(along, train_folder, tmp_path):
    first = train_folder / "checkpoints" / "iter_0000000.pt"
    out = tmp_path / "single"
    result = run_cli(
        "sweep", "--model", "cnf", *TINY_CNF_ARGS, *GRID, "--checkpoint", first, "--out", out, "--no-report"
    )
    assert result.exit_code == 0, result.output
    single, several = results(out), results(along)
    at_first = several[several.checkpoint == "cnf_train/iter_0000000"].reset_index(drop=True)
    # One checkpoint is the sweep it always was: no checkpoint name (so its ids and folders are as before), its
    # iteration known.
    assert (single["checkpoint"] == "").all() and (single["train_iteration"] == 0).all()
    columns = [c for c in result_columns_except_cost(single) if c != "checkpoint"]
    pd.testing.assert_frame_equal(single[columns], at_first[columns], check_exact=True)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["fingerprint"]["checkpoints"] == [] and manifest["checkpoint"]["path"] == str(first.resolve())
    assert not any("-ckpt-" in p.name for p in shards(out))


def test_a_comma_list_and_a_config_file_list_name_files_by_their_stems(train_folder, tmp_path):
    files = [train_folder / "checkpoints" / f"iter_{i:07d}.pt" for i in (20, 0)]
    toml = tmp_path / "sweep.toml"
    toml.write_text(f'model = "cnf"\ncheckpoint = {json.dumps([str(f) for f in files])}\n')
    from_file = engine.plan(config.resolve(toml, {"options": TINY_CNF}))
    from_cli = engine.plan(
        config.resolve(None, {"model": "cnf", "options": TINY_CNF, "checkpoint": ",".join(map(str, files))})
    )
    from_api = api.plan_sweep("cnf", options=TINY_CNF, checkpoint=[str(f) for f in files], out=tmp_path / "api").plan
    for plan in (from_file, from_cli, from_api):
        assert [(c.name, c.iteration) for c in plan.checkpoints] == [("iter_0000020", 20), ("iter_0000000", 0)]
        assert plan.grid.checkpoints == ("iter_0000020", "iter_0000000")
        assert len(plan.configurations) == 2 * 14 * 3 and plan.configurations[0].checkpoint == "iter_0000020"
        assert "x 2 checkpoints" in plan.grid.describe()
    # The same file twice (once by itself, once in its folder) runs once; a file without a sidecar has no iteration.
    bare = tmp_path / "bare.pt"
    bare.write_bytes(files[1].read_bytes())
    plan = engine.plan(
        config.validate({"model": "cnf", "options": TINY_CNF, "checkpoint": f"{files[1]},{train_folder},{bare}"})
    )
    assert [(c.name, c.iteration) for c in plan.checkpoints] == [
        ("iter_0000000", 0),
        ("cnf_train/iter_0000010", 10),
        ("cnf_train/iter_0000020", 20),
        ("bare", None),
    ]


def test_the_report_follows_the_errors_along_training(along):
    report = (along / "report.md").read_text()
    png = along / "figures" / "along_training.png"
    assert png.is_file() and imread(png).shape[0] > 100
    assert "](figures/along_training.png)" in report
    assert "judges the last in training, `cnf_train/iter_0000020` (iteration 20)" in report
    assert f"the grid ran once for each of 3 checkpoints ({PER_CHECKPOINT * len(ITERATIONS)} in all)" in report
    section = report.split("## Along training", 1)[1].split("\n## ", 1)[0]
    table = results(along)
    largest = table[table.n_timesteps == table.n_timesteps.max()]

    statements = re.findall(
        r"^- (float16 \w+ none): parameter gradient error (grows|falls|stays within|varies) ([\d.e+-]+)× (.*)$",
        section,
        re.M,
    )
    assert len(statements) == 2
    for setup, kind, factor, rest in statements:
        _, library, _ = setup.split()
        runs = largest[largest.library == library].sort_values("train_iteration")
        values = list(runs["grad_params_rel_err"])
        assert kind == "grows"  # the weights grow 3× per checkpoint here
        assert values[-1] / values[0] >= ALONG_TRAINING
        assert math.isclose(float(factor), values[-1] / values[0], rel_tol=5e-3)
        first, last = re.search(r"\(([\d.e+-]+) → ([\d.e+-]+)\)", rest).groups()
        assert (first, last) == (f"{values[0]:.2e}", f"{values[-1]:.2e}")
        a, b = map(int, re.search(r"most between (\d+) and (\d+)", rest).groups())
        steps = {(i, j): w / v for (i, v), (j, w) in zip(zip(ITERATIONS, values), zip(ITERATIONS[1:], values[1:]))}
        assert (a, b) == max(steps, key=steps.get)

    rows = [line.strip("|").split("|") for line in section.splitlines() if line.startswith("| float16")]
    assert len(rows) == 2 * len(ITERATIONS)
    for setup, iteration, checkpoint, over_u, ratio in ([c.strip() for c in row] for row in rows):
        run = largest[(largest.library == setup.split()[1]) & (largest.checkpoint == checkpoint)].iloc[0]
        first = largest[(largest.library == setup.split()[1]) & (largest.train_iteration == 0)].iloc[0]
        assert int(iteration) == run.train_iteration
        assert math.isclose(float(over_u), run.grad_params_rel_err_over_u, rel_tol=5e-3)
        assert math.isclose(float(ratio), run.grad_params_rel_err / first.grad_params_rel_err, rel_tol=5e-3)

    # The training folder's own summary, in its numbers.
    sentence = next(line for line in section.splitlines() if line.startswith("Training itself"))
    assert "training_summary.parquet" in sentence
    assert "float32 2.61 (the reference)" in sentence and "float16-native-dynamic 2.64 (+1.00% against it)" in sentence


def test_without_iterations_the_last_checkpoint_given_is_judged(along):
    """Files without their JSON: no training iteration, so no Along training; the rest judges the last file given."""
    table = results(along).assign(train_iteration=None)
    assert last_checkpoint(table) == "cnf_train/iter_0000020" and trends(table) == []
    assert "judges the last given, `cnf_train/iter_0000020` (no training iteration is known for it)" in scope_note(
        table
    )
    reordered = table[table.checkpoint != "cnf_train/iter_0000020"]
    assert last_checkpoint(reordered) == "cnf_train/iter_0000010"


def test_the_verdict_judges_the_last_checkpoint_and_says_so(along):
    report = (along / "report.md").read_text()
    verdict = report.split("## Verdict", 1)[1].split("\n## ", 1)[0]
    last = results(along).query("checkpoint == 'cnf_train/iter_0000020'")
    worst = last.groupby("library")["grad_params_rel_err"].max()
    for library, value in worst.items():
        assert f"with {library}: " in verdict and f"{value:.2e}" in verdict
    shown = run_cli("show", along, columns=WIDE_TABLES)  # the table's iteration column in full
    assert shown.exit_code == 0
    flat = " ".join(shown.stdout.split())  # the lines unwrapped, whatever the terminal's width
    assert flat.count("verdict: at checkpoint cnf_train/iter_0000020: float16 with") == 2
    # The iterations name the checkpoints of one train folder: the table shows them, not the names.
    assert "iteration" in flat and "cnf_train/iter_0000010" not in flat.split("verdict:")[0]


def test_check_compares_rows_by_checkpoint(along, tmp_path):
    same = run_cli("check", along, "--baseline", along)
    assert same.exit_code == 0, same.output
    # Another checkpoint's numbers under the last checkpoint's name: check sees the change at that checkpoint only.
    table = results(along)
    moved = table.copy()
    last = moved.checkpoint == "cnf_train/iter_0000020"
    moved.loc[last, "grad_params_rel_err"] = moved.loc[last, "grad_params_rel_err"].to_numpy() * 100
    moved.to_parquet(tmp_path / "moved.parquet")
    changed = run_cli("check", tmp_path / "moved.parquet", "--baseline", along / "results.parquet")
    assert changed.exit_code == 1 and "4 regressions" in changed.stdout
    judged = compare(moved, table).configurations
    regressed = judged[judged.verdict == "regression"]
    assert len(judged) == len(table) and (judged.presence == "both").all()
    assert set(regressed["checkpoint"]) == {"cnf_train/iter_0000020"} and len(regressed) == PER_CHECKPOINT
    assert regressed["label"].str.endswith(" @ cnf_train/iter_0000020").all()


def test_an_interrupted_sweep_over_checkpoints_resumes_without_recomputing(train_folder, tmp_path):
    out = tmp_path / "resumed"
    plan = engine.plan(
        config.validate(
            {
                "model": "cnf",
                "options": TINY_CNF,
                "checkpoint": str(train_folder),
                "timesteps": [4],
                "method": ["rk4"],
                # Two dtypes, not two scalings: runs differing in their scaling only are measured together.
                "dtype": ["float16", "bfloat16"],
                "library": ["native"],
                "scaling": ["none"],
                "noise_batches": 2,
                "device": "cpu",
            }
        )
    )
    n_total = 2 * len(ITERATIONS)
    with pytest.raises(engine.SweepInterrupted) as stopped:
        engine.run(plan, out, stop_requested=lambda: len(shards(out)) >= 3)  # into the second checkpoint
    assert (stopped.value.n_done, stopped.value.n_total) == (3, n_total)
    finished = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in shards(out)}

    outcome = engine.run(engine.plan(plan.config), out)
    assert (outcome.n_reused, outcome.n_run, len(outcome.results)) == (3, n_total - 3, n_total)
    assert {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in shards(out) if p.name in finished} == finished
    # Only the references of the configurations that ran: the second checkpoint's again (it has one left), the third's.
    assert outcome.reference_solves == 2

    uninterrupted = engine.run(engine.plan(plan.config), tmp_path / "whole")
    columns = result_columns_except_cost(uninterrupted.results)
    pd.testing.assert_frame_equal(outcome.results[columns], uninterrupted.results[columns], check_exact=True)


def test_a_changed_checkpoint_file_is_another_sweep(train_folder, tmp_path):
    copied = write_train_folder(tmp_path / "run", iterations=(0, 5))
    args = [
        "sweep",
        "--model",
        "cnf",
        *TINY_CNF_ARGS,
        "--timesteps",
        "2",
        "--method",
        "euler",
        "--dtype",
        "bfloat16",
        "--library",
        "native",
        "--scaling",
        "none",
        "--noise-batches",
        "0",
        "--checkpoint",
        copied,
        "--out",
        tmp_path / "s",
        "--no-report",
    ]
    assert run_cli(*args).exit_code == 0
    assert json.loads((tmp_path / "s" / "manifest.json").read_text())["n_configurations"] == 2
    weights = copied / "checkpoints" / "iter_0000005.pt"
    torch.save({k: v * 2 for k, v in torch.load(weights, weights_only=True).items()}, weights)
    refused = run_cli(*args)
    assert refused.exit_code == 2 and "holds a different sweep" in refused.stderr and "checkpoints" in refused.stderr


@pytest.mark.parametrize(
    "make, says",
    [
        (lambda root: (root / "checkpoints").mkdir(parents=True), "is a folder with no checkpoints"),
        (lambda root: _sidecar(root, "{not json"), "is not valid JSON"),
        (lambda root: _sidecar(root, '{"loss": 1.0}'), 'has no "iteration"'),
        (lambda root: _foreign_weights(root), "does not fit model cnf"),
    ],
    ids=["empty folder", "sidecar not JSON", "sidecar without iteration", "weights of another model"],
)
def test_bad_checkpoints_are_one_line_and_exit_2_before_anything_is_printed(train_folder, tmp_path, make, says):
    bad = tmp_path / "bad"
    make(bad)
    out = tmp_path / "out"
    result = run_cli("sweep", "--model", "cnf", *TINY_CNF_ARGS, "--checkpoint", f"{train_folder},{bad}", "--out", out)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1 and says in result.stderr
    assert not out.exists()


def _sidecar(root: Path, text: str) -> None:
    write_train_folder(root, iterations=(0, 7))
    (root / "checkpoints" / "iter_0000007.json").write_text(text)


def _foreign_weights(root: Path) -> None:
    write_train_folder(root, iterations=(0, 7))
    torch.save({"layer.weight": torch.zeros(2, 2)}, root / "checkpoints" / "iter_0000007.pt")


def test_two_workers_give_the_sequential_rows_over_checkpoints(along, train_folder, tmp_path):
    request = config.validate(
        {
            "model": "cnf",
            "options": TINY_CNF,
            "checkpoint": str(train_folder),
            "timesteps": [4, 8],
            "method": ["rk4"],
            "dtype": ["float16"],
            "library": ["native", "torchdiffeq"],
            "scaling": ["none"],
            "noise_batches": 4,
            "device": "cpu",
            "workers": 2,
        }
    )
    outcome = engine.run(engine.plan(request), tmp_path / "parallel")
    parallel, sequential = results(tmp_path / "parallel"), results(along)
    columns = result_columns_except_cost(sequential)
    pd.testing.assert_frame_equal(parallel[columns], sequential[columns], check_exact=True)
    # one per (checkpoint, library, method, n_timesteps)
    assert outcome.reference_solves == PER_CHECKPOINT * len(ITERATIONS)


def test_folders_from_before_the_axis_resume_and_read_with_one_set_of_weights(tmp_path):
    out = tmp_path / "old"
    plan = engine.plan(config.validate({"model": "linear", "timesteps": [2], "method": ["euler"]}))
    engine.run(plan, out)
    for path in shards(out):  # shards as they were written before the checkpoint axis
        pq.write_table(pq.read_table(path).drop_columns(["checkpoint", "train_iteration"]), path)
    as_written_before_content_hashes(out)
    resumed = engine.run(engine.plan(plan.config), out)
    assert (resumed.n_reused, resumed.n_run) == (7, 0)
    loaded = load(out).results
    assert (loaded["checkpoint"] == "").all() and loaded["train_iteration"].isna().all()
    old = loaded.drop(columns=["checkpoint", "train_iteration"])
    old.to_parquet(tmp_path / "old.parquet")
    assert run_cli("check", out, "--baseline", tmp_path / "old.parquet").exit_code == 0


def test_the_shipped_along_training_config_fits_the_shipped_training_run():
    repo = Path(__file__).resolve().parents[1]
    request = config.resolve(
        repo / "configs" / "cnf_2spirals_along_training.toml", {"checkpoint": str(repo / "reports" / "cnf-train")}
    )
    plan = engine.plan(request)  # the weights load: the config's model options are the training's
    iterations = [c.iteration for c in plan.checkpoints]
    assert len(iterations) >= 3 and iterations == sorted(iterations) and iterations[0] == 0
    assert len(plan.configurations) == 16 * len(iterations) and max(plan.grid.timesteps) == 32


def test_the_noise_is_measured_at_the_batch_the_checkpoint_trained_at(train_folder, tmp_path):
    """Swept at batch 8 to be quick, trained at batch 16 (its sidecar's options): the noise is the training's, unless
    --noise-batch-size says otherwise."""
    weights = str(train_folder / "checkpoints" / "iter_0000000.pt")
    options = ["-o", "hidden=8", "-o", "width=8", "-o", "batch=8"]
    grid = ["--timesteps", "4", "--method", "rk4", "--dtype", "float16", "--library", "native", "--scaling", "none"]
    grid += ["--noise-batches", "4", "--no-report"]
    trained = run_cli("sweep", "-m", "cnf", *options, "--checkpoint", weights, *grid, "--out", tmp_path / "trained")
    asked = run_cli(
        "sweep",
        "-m",
        "cnf",
        *options,
        "--checkpoint",
        weights,
        *grid,
        "--noise-batch-size",
        "4",
        "--out",
        tmp_path / "asked",
    )
    assert trained.exit_code == asked.exit_code == 0, trained.output + asked.output
    assert results(tmp_path / "trained").grad_noise_batch_size.unique().tolist() == [16]
    assert results(tmp_path / "asked").grad_noise_batch_size.unique().tolist() == [4]


REPORTS = Path(__file__).resolve().parent.parent / "reports"


def test_a_cloned_along_training_report_finds_its_train_folder_beside_it_by_the_checkpoints_bytes(tmp_path):
    """The committed sweep's manifest records checkpoint paths on the machine that ran it; wherever it is cloned, the
    train folder of that name beside the sweep's is read when its checkpoint has the recorded bytes, and not when it
    has others."""
    for name in ("cnf-train", "cnf-along-training"):
        shutil.copytree(REPORTS / name, tmp_path / name)
    sweep_folder = tmp_path / "cnf-along-training"
    recorded = json.loads((sweep_folder / "manifest.json").read_text())["checkpoints"]
    assert not any(Path(record["path"]).is_relative_to(tmp_path) for record in recorded)
    written = load(sweep_folder).write_report().read_text()
    assert written == (REPORTS / "cnf-along-training" / "report.md").read_text()
    assert "Training itself (`../cnf-train/training_summary.parquet`" in written
    for record in recorded:
        checkpoint = tmp_path / "cnf-train" / "checkpoints" / Path(record["path"]).name
        checkpoint.write_bytes(checkpoint.read_bytes() + b"\0")
    # Not the copy beside it any more: the recorded path where it still exists (the machine that ran it), else none.
    assert "`../cnf-train/training_summary.parquet`" not in load(sweep_folder).write_report().read_text()
