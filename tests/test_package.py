"""The package stands on its own: every link in the README and docs/ resolves inside the repository,
and the metadata says what the code needs."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "reports" / "README.md"]
# [text](target) and <img src="target">, outside code; targets with a scheme (https:, mailto:) leave the repository.
LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|src=\"([^\"]+)\"")
FENCE = re.compile(r"```.*?```", re.S)


def links(document: Path) -> list[str]:
    text = re.sub(r"`[^`\n]*`", "", FENCE.sub("", document.read_text()))
    return [a or b for a, b in LINK.findall(text)]


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_resolves_inside_the_repository(document):
    found = links(document)
    assert found or document.name != "README.md" or document.parent != ROOT
    for link in found:
        assert not re.match(r"[a-z][a-z0-9+.-]*:", link), f"{document.name}: {link} leaves the repository"
        target = (document.parent / link.split("#")[0]).resolve()
        assert target.is_relative_to(ROOT), f"{document.name}: {link} points outside the repository"
        assert target.exists(), f"{document.name}: {link} does not exist"


def test_the_docs_are_linked_from_the_readme():
    linked = {(ROOT / link.split("#")[0]).resolve() for link in links(ROOT / "README.md")}
    assert {p.resolve() for p in (ROOT / "docs").glob("*.md")} <= linked


def test_every_guide_page_is_in_the_site_navigation():
    # mkdocs --strict (in .ci/run) refuses a page left out of the nav; this says so without mkdocs installed.
    nav = set(re.findall(r":\s*([\w-]+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), re.M))
    assert {p.name for p in (ROOT / "docs").glob("*.md")} == nav


def test_the_readme_is_short():
    # The README is the three-minute read; everything else lives in the guide under docs/.
    assert len((ROOT / "README.md").read_text().splitlines()) <= 150


def test_the_metadata_matches_the_code():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    minimum = tuple(int(part) for part in re.fullmatch(r">=(\d+)\.(\d+)", project["requires-python"]).groups())
    assert minimum >= (3, 11)  # tomllib, used to read config files, is in the standard library from 3.11
    assert sys.version_info[:2] >= minimum
    assert project["license"] == "MIT" and (ROOT / "LICENSE").read_text().startswith("MIT License")
    torch_bound = next(d for d in project["dependencies"] if d.startswith("torch>="))
    # torch.get_autocast_dtype
    assert tuple(int(p) for p in torch_bound.removeprefix("torch>=").split(".")[:2]) >= (
        2,
        4,
    )


def test_the_lock_pins_every_requirement_but_torch_within_what_pyproject_allows():
    """constraints.txt, which the README and .ci/run install with, is current with pyproject.toml (after a change
    there, `.ci/lock` writes it again): every requirement of the package and its locked extras pinned, torch not."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
    from packaging.version import Version

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    locked = ("dev", "docs", "torchode", "slurm")
    requirements = [
        Requirement(r)
        for r in [*project["dependencies"], *(r for e in locked for r in project["optional-dependencies"][e])]
    ]
    text = (ROOT / "constraints.txt").read_text()
    pins = {canonicalize_name(name): Version(version) for name, version in re.findall(r"^([\w.-]+)==(\S+)", text, re.M)}
    assert "torch" not in pins  # each user's own build (README)
    for requirement in requirements:
        if requirement.name == "torch":
            continue
        pinned = pins.get(canonicalize_name(requirement.name))
        assert pinned is not None, f"constraints.txt pins no {requirement.name}: run .ci/lock"
        assert requirement.specifier.contains(pinned), (
            f"constraints.txt pins {requirement.name} {pinned}: not {requirement}"
        )


def test_every_subpackage_is_in_the_wheel():
    packages = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "roundoff_analyzer").rglob("__init__.py")}
    assert found <= packages, f"not in pyproject.toml's packages: {sorted(found - packages)}"
