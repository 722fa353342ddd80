"""The card a sweep ran on and the arithmetic of its float32 rows: the manifest's `device_details`, the rows'
`float32_matmul`, what `check`, `show` and the report say of them, and the answer's words on tensor cores. The CUDA
test runs a real sweep on the GPU; the others read real CPU sweeps whose manifest then says what a CUDA sweep writes."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch

from roundoff_analyzer.core.cards import TENSOR_CORES_FROM, float32_matmul, tensor_cores
from roundoff_analyzer.execution import engine
from roundoff_analyzer.judging.environments import environments, float32_not_ieee
from roundoff_analyzer.measuring.environment_columns import ENVIRONMENT_COLUMNS, cpu_model
from roundoff_analyzer.storage.results import load_results

from .conftest import TINY_OTFLOW, results, run_cli
from .test_parallel import tiny_otflow_request

REPO = Path(__file__).resolve().parent.parent
# float32 beside both low dtypes, so that the answer has a time ratio against float32 for each.
WITH_FLOAT32 = ["--model", "otflow", *TINY_OTFLOW, "--device", "cpu", "--no-report"] + (
    ["--timesteps", "4", "--method", "rk4", "--library", "native", "--dtype", "float16,bfloat16,float32"]
)
T4 = ("Tesla T4", "7.5")
H100 = ("NVIDIA H100 80GB HBM3", "9.0")


@pytest.fixture(scope="module")
def card_sweep(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("card") / "sweep"
    # No timing pass: its table would say this CPU, where the tests dress the rows as a card's.
    result = run_cli("sweep", *WITH_FLOAT32, "--no-timing", "--out", out)
    assert result.exit_code == 0, result.output
    return out


def copied(folder: Path, to: Path) -> Path:
    shutil.copytree(folder, to)
    return to


def as_measured_on(folder: Path, name: str, capability: str) -> None:
    """The manifest as a sweep on that card writes it (TF32 off, torch's defaults), the rows left as measured."""
    path = folder / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["device"] = "cuda:0"
    manifest["device_details"] = {
        "type": "cuda",
        "name": name,
        "compute_capability": capability,
        "tensor_cores": tensor_cores(capability),
        "bf16_supported": True,
        "matmul_allow_tf32": False,
        "cudnn_allow_tf32": True,
        "float32_matmul_precision": "highest",
        "float32_matmul": "ieee",
    }
    path.write_text(json.dumps(manifest))


def test_tensor_cores_take_float16_from_volta_and_bfloat16_from_ampere():
    assert tensor_cores("6.1") == {"float16": False, "bfloat16": False}
    assert tensor_cores("7.5") == {"float16": True, "bfloat16": False}
    assert tensor_cores("8.0") == tensor_cores("9.0") == tensor_cores("12.0") == {"float16": True, "bfloat16": True}
    assert set(TENSOR_CORES_FROM) == {"float16", "bfloat16"}


def test_the_float32_matmul_arithmetic_follows_torchs_settings():
    assert float32_matmul("cuda", "highest", allow_tf32=False) == "ieee"
    assert float32_matmul("cuda", "highest", allow_tf32=True) == "tf32"
    assert float32_matmul("cuda", "high", allow_tf32=False) == "tf32"
    assert float32_matmul("cuda", "medium", allow_tf32=False) == "tf32"
    assert float32_matmul("cpu", "highest", allow_tf32=True) == "ieee"  # CUDA's switch says nothing of the CPU
    assert float32_matmul("cpu", "high") == "tf32"
    assert float32_matmul("cpu", "medium") == "bf16"


def test_a_cpu_sweep_records_its_device_and_rows_that_ran_ieee_float32(card_sweep):
    details = json.loads((card_sweep / "manifest.json").read_text())["device_details"]
    assert details == {
        "type": "cpu",
        "name": cpu_model(),
        "float32_matmul_precision": "highest",
        "float32_matmul": "ieee",
    }
    assert set(results(card_sweep)["float32_matmul"]) == {"ieee"}


def test_rows_say_the_float32_matmul_precision_they_ran_under_not_the_first_one_seen(card_sweep, tmp_path):
    """The environment columns are read once per process; this one is read per row, as a script may change it."""
    assert set(results(card_sweep)["float32_matmul"]) == {"ieee"}  # measured in this process, before the change
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("medium")
        out = tmp_path / "medium"
        assert run_cli("sweep", *WITH_FLOAT32, "--dtype", "float32", "--out", out).exit_code == 0
    finally:
        torch.set_float32_matmul_precision(before)
    table = results(out)
    assert set(table["float32_matmul"]) == {"bf16"}
    details = json.loads((out / "manifest.json").read_text())["device_details"]
    assert (details["float32_matmul_precision"], details["float32_matmul"]) == ("medium", "bf16")
    shown = " ".join(run_cli("show", out, columns=400).stdout.split())
    n = len(table)
    assert f"float32: {n} of the {n} float32 rows ran their matrix products in bf16 (column float32_matmul)" in shown


def test_tables_from_before_the_column_read_as_unknown_not_as_ieee_nor_tf32(tmp_path):
    # The CI baseline as a sweep from before the column and the manifest's record wrote it.
    folder = copied(REPO / "reports" / "baselines" / "otflow-ci", tmp_path / "before")
    rows = pd.read_parquet(folder / "results.parquet")
    rows.drop(columns=["float32_matmul"], errors="ignore").to_parquet(folder / "results.parquet")
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest.pop("device_details", None)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    table = load_results(folder)
    assert "float32_matmul" in ENVIRONMENT_COLUMNS and "float32_matmul" not in table
    assert "float32_matmul" not in environments(table) and float32_not_ieee(table) is None
    shown = run_cli("show", folder, columns=400)
    assert shown.exit_code == 0 and "float32:" not in shown.stdout


def test_check_names_a_baseline_measured_under_tf32(card_sweep, tmp_path):
    baseline = copied(card_sweep, tmp_path / "baseline")
    table = pd.read_parquet(baseline / "results.parquet")
    table["float32_matmul"] = "tf32"
    table["sol_rel_err"] = table["sol_rel_err"] / 1000  # so that the new rows are a regression
    table.to_parquet(baseline / "results.parquet")
    run = run_cli("check", card_sweep, "--baseline", baseline, columns=400)
    assert run.exit_code == 1
    assert "the environment differs from the baseline's: float32 matmul: tf32 in the baseline, ieee now" in run.stdout


def test_the_report_says_where_float32_rows_ran_under_tf32(card_sweep, tmp_path):
    folder = copied(card_sweep, tmp_path / "tf32")
    assert run_cli("report", folder).exit_code == 0
    assert "not IEEE float32" not in (folder / "report.md").read_text()
    table = pd.read_parquet(folder / "results.parquet")
    float32 = table["dtype"] == "float32"
    table.loc[float32, "float32_matmul"] = "tf32"
    table.to_parquet(folder / "results.parquet")
    assert run_cli("report", folder).exit_code == 0
    n = int(float32.sum())
    assert (
        f"**float32 is not IEEE float32 here:** {n} of the {n} float32 rows ran their matrix products in tf32 "
        "(column float32_matmul), not in IEEE float32" in (folder / "report.md").read_text()
    )


EXPECTED = {
    T4: {
        "float16": "float16 has tensor cores on this card (Tesla T4, compute capability 7.5)",
        "bfloat16": "bfloat16 on this card (Tesla T4, compute capability 7.5) runs without tensor cores (they take "
        "bfloat16 from compute capability 8.0)",
    },
    H100: {
        "float16": "float16 has tensor cores on this card (NVIDIA H100 80GB HBM3, compute capability 9.0)",
        "bfloat16": "bfloat16 has tensor cores on this card (NVIDIA H100 80GB HBM3, compute capability 9.0)",
    },
}


# The native solver's backward, said after the card where the answer's library is native.
BACKWARD = r"(; the native solver's backward: [a-z ]+(, peak [\d.–]+ MiB)?)?"


@pytest.mark.parametrize("card", [T4, H100], ids=["cc7.5", "cc9.0"])
def test_the_answer_says_beside_the_time_ratio_whether_the_card_has_tensor_cores(card_sweep, tmp_path, card):
    folder = copied(card_sweep, tmp_path / "on-card")
    as_measured_on(folder, *card)
    assert run_cli("report", folder).exit_code == 0
    report = (folder / "report.md").read_text()
    ratio = r"\d+\.\d\d× float32's time"
    for dtype, words in EXPECTED[card].items():
        assert re.search(
            rf"- \*\*{dtype}\*\*: train with .* Cost on cuda:0: {ratio}, [^;]+; {re.escape(words)}{BACKWARD}\.", report
        )
    chosen = re.search(r"\*\*Train with (\w+)\*\*", report)
    assert chosen is not None and chosen[1] in EXPECTED[card]
    assert re.search(rf"at {ratio}, and {re.escape(EXPECTED[card][chosen[1]])};", report)
    shown = run_cli("show", folder, columns=400).stdout
    assert all(words in " ".join(shown.split()) for words in EXPECTED[card].values())


def test_a_folder_from_before_the_record_says_nothing_of_the_card(card_sweep, tmp_path):
    folder = copied(card_sweep, tmp_path / "before")
    as_measured_on(folder, *T4)
    manifest = json.loads((folder / "manifest.json").read_text())
    del manifest["device_details"]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    assert run_cli("report", folder).exit_code == 0
    report = (folder / "report.md").read_text()
    assert "float32's time" in report and "tensor cores" not in report


@pytest.mark.cuda
def test_on_cuda_the_manifest_records_the_card_and_the_rows_their_float32_matmul(tmp_path):
    major, minor = torch.cuda.get_device_capability()
    tf32_before = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        ieee = engine.run(engine.plan(tiny_otflow_request(device="cuda")), tmp_path / "ieee").results
        details = json.loads((tmp_path / "ieee" / "manifest.json").read_text())["device_details"]
        torch.backends.cuda.matmul.allow_tf32 = True
        tf32 = engine.run(engine.plan(tiny_otflow_request(device="cuda")), tmp_path / "tf32").results
        details_tf32 = json.loads((tmp_path / "tf32" / "manifest.json").read_text())["device_details"]
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32_before
    precision = torch.get_float32_matmul_precision()
    assert details == {
        "type": "cuda",
        "name": torch.cuda.get_device_name(),
        "compute_capability": f"{major}.{minor}",
        "tensor_cores": {dtype: (major, minor) >= first for dtype, first in TENSOR_CORES_FROM.items()},
        "bf16_supported": torch.cuda.is_bf16_supported(),
        "matmul_allow_tf32": False,
        "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
        "float32_matmul_precision": precision,
        "float32_matmul": "ieee" if precision == "highest" else "tf32",
    }
    assert set(ieee["float32_matmul"]) == {details["float32_matmul"]}
    assert set(ieee["compute_capability"]) == {f"{major}.{minor}"}
    assert details_tf32["matmul_allow_tf32"] is True and details_tf32["float32_matmul"] == "tf32"
    assert set(tf32["float32_matmul"]) == {"tf32"}
