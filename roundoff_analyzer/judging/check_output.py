"""A check's outcome for CI: a markdown summary (for a pull-request comment or job summary) and JUnit XML."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pandas as pd
from tabulate import tabulate

from .check import IMPROVEMENT, MISSING, NEW, REFERENCE_MOVED, REGRESSION, SKIPPED, Comparison

# The verdicts a reader is shown, in this order, each under its own heading.
REPORTED = (
    (REGRESSION, "Regressions"),
    (REFERENCE_MOVED, "References moved"),
    (IMPROVEMENT, "Improvements"),
    (NEW, "New configurations"),
    (MISSING, "Missing configurations"),
)
SUITE = "roundoff check"


def headline(comparison: Comparison) -> str:
    counts = comparison.counts()
    regressions, moved = counts[REGRESSION], counts[REFERENCE_MOVED]
    failed = ([f"{regressions} regression{'s' if regressions != 1 else ''}"] if regressions else []) + (
        [f"{moved} reference{'s' if moved != 1 else ''} moved"] if moved else []
    )
    return f"failed: {', '.join(failed)}" if failed else "passed"


def configuration_name(row) -> str:
    return f"{row['model']}: {row['label']}"


def markdown_summary(comparison: Comparison) -> str:
    lines = [
        f"## roundoff check {headline(comparison)}",
        "",
        f"{comparison.summary()}. Tolerance: {comparison.tolerances.describe()} (u: the dtype's unit roundoff).",
        *(f"\n{_md(line[0].upper() + line[1:])}." for line in comparison.yardsticks),
    ]
    for verdict, heading in REPORTED:
        rows = comparison.with_verdict(verdict)
        if rows.empty:
            continue
        cells = [
            [_md(configuration_name(r)), _md(r["status_baseline"]), _md(r["status_new"]), _md(r["reasons"])]
            for _, r in rows.iterrows()
        ]
        table = tabulate(cells, headers=["configuration", "baseline", "now", "what changed"], tablefmt="github")
        lines += ["", f"### {heading} ({len(rows)})", "", table]
    return "\n".join(lines) + "\n"


def _md(value) -> str:
    """A markdown table cell: `|` escaped, no line breaks."""
    text = "" if value is None or (not isinstance(value, str) and pd.isna(value)) else str(value)
    return text.replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def junit_xml(comparison: Comparison) -> ET.ElementTree:
    """One test case per configuration: regressions fail, configurations
    skipped in both (or missing and not ok) skip."""
    counts = comparison.counts()
    skipped = counts[SKIPPED] + counts[MISSING]
    attributes = {
        "name": SUITE,
        "tests": str(len(comparison.configurations)),
        "failures": str(counts[REGRESSION] + counts[REFERENCE_MOVED]),
        "errors": "0",
        "skipped": str(skipped),
    }
    root = ET.Element("testsuites", attributes)
    suite = ET.SubElement(root, "testsuite", attributes)
    for _, row in comparison.configurations.iterrows():
        case = ET.SubElement(suite, "testcase", {"classname": _classname(row), "name": row["label"]})
        if row["verdict"] in (REGRESSION, REFERENCE_MOVED):
            ET.SubElement(case, "failure", {"message": row["reasons"], "type": row["verdict"]}).text = row["reasons"]
        elif row["verdict"] in (SKIPPED, MISSING):
            ET.SubElement(case, "skipped", {"message": row["reasons"]})
        elif row["reasons"]:
            ET.SubElement(case, "system-out").text = f"{row['verdict']}: {row['reasons']}"
    ET.indent(root)
    return ET.ElementTree(root)


def _classname(row) -> str:
    """`roundoff.<model>.<library>`; a dot in a model name (a file path) would read as one more level."""
    return ".".join(["roundoff", *(re.sub(r"[^A-Za-z0-9_]+", "_", str(row[c])) for c in ("model", "library"))])


def only_on_one_side(comparison: Comparison, shown: int = 10) -> list[str]:
    """One line each way naming the configurations that only one side has (none when the grids match)."""
    lines = []
    for presence, side in (("new only", "only in the new results"), ("baseline only", "only in the baseline")):
        labels = comparison.configurations.loc[comparison.configurations["presence"] == presence, "label"].tolist()
        if labels:
            more = f" and {len(labels) - shown} more" if len(labels) > shown else ""
            lines.append(f"{side} ({len(labels)}): {'; '.join(labels[:shown])}{more}")
    return lines
