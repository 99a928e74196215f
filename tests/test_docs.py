"""The documentation: the site builds without a warning, its examples run, and neither the README
nor docs/ speaks of how the software was developed.

* `mkdocs build --strict` (mkdocs.yml sets strict and turns every link, anchor and nav problem
  into a warning): a broken link, a page missing from the nav or a nav entry without a page
  fails the test.
* Every ```python block of README.md and docs/*.md runs, in a fresh process whose working
  directory holds a link to the committed datasets/ (so examples read `datasets/...` and write
  next to it). A block preceded by `<!-- docs-test: skip (why) -->` is left out; a ```bash
  block runs only when preceded by `<!-- docs-test: run -->` (most install packages, run the
  suite or time things), with `rtsoa` meaning `python -m rtsoa.cli` of this checkout. The
  blocks of one page run in order in one directory, so a later block may read what an earlier
  one wrote.
* The hygiene checks: no path of a build machine, no ticket number, no dated section.
"""

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs").glob("*.md"))
DOCUMENTS = [ROOT / "README.md", *PAGES]

FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```\s*$", re.MULTILINE | re.DOTALL)
MARK = re.compile(r"<!--\s*docs-test:\s*(skip|run)\b[^>]*-->\s*$")


def code_blocks(path):
    """(language, code, mark) of every fenced block of a Markdown file, in order; mark is the
    `docs-test` directive on the line just before the fence ('skip', 'run' or None)."""
    text = path.read_text()
    blocks = []
    for match in FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        directive = MARK.search(before)
        blocks.append((match.group(1), match.group(2), directive and directive.group(1)))
    return blocks


def runnable(path):
    """The blocks of a page the test runs: ('python' | 'bash', code)."""
    chosen = []
    for language, code, mark in code_blocks(path):
        if language == "python" and mark != "skip":
            chosen.append(("python", code))
        elif language == "bash" and mark == "run":
            chosen.append(("bash", code))
    return chosen


def _environment():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["NO_MKDOCS_2_WARNING"] = "1"  # the theme's banner about its successor, not a problem
    return env


def test_the_site_builds_strict(tmp_path):
    mkdocs = pytest.importorskip("mkdocs")
    assert mkdocs
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        env=_environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "site" / "index.html").exists()
    assert "WARNING" not in result.stderr, result.stderr


def test_every_page_is_in_the_nav():
    """mkdocs warns about a page left out of the nav; this says which, without a build."""
    nav = (ROOT / "mkdocs.yml").read_text()
    missing = [page.name for page in PAGES if f": {page.name}" not in nav]
    assert not missing, f"docs pages not in mkdocs.yml's nav: {missing}"


@pytest.mark.parametrize(
    "path", [path for path in DOCUMENTS if runnable(path)], ids=lambda path: path.name
)
def test_examples_run(path, tmp_path):
    (tmp_path / "datasets").symlink_to(ROOT / "datasets")
    for number, (language, code) in enumerate(runnable(path)):
        if language == "python":
            command = [sys.executable, "-c", code]
        else:
            prelude = f'rtsoa() {{ "{sys.executable}" -m rtsoa.cli "$@"; }}\n'
            command = ["bash", "-euo", "pipefail", "-c", prelude + code]
        result = subprocess.run(
            command, cwd=tmp_path, env=_environment(), capture_output=True, text=True, timeout=600
        )
        assert result.returncode == 0, (
            f"{path.name}, {language} block {number}:\n{code}\n"
            f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
        )


def test_the_marks_are_known():
    """A misspelt directive would silently run or skip a block."""
    for path in DOCUMENTS:
        for line in path.read_text().splitlines():
            if line.lstrip().startswith("<!--") and "docs-test" in line:
                assert MARK.search(line), f"{path.name}: unknown docs-test mark {line!r}"


# What the README and docs/ must not regain. Each pattern names what it catches.
FORBIDDEN = {
    "a path of a build machine": re.compile(
        r"(?<![\w.~-])/(?:work|home|root|tmp|Users|mnt|srv|opt|scratch)/[\w.-]"
    ),
    "a ticket number": re.compile(r"\b(?:issue|ticket|bug)\s*#?\d+", re.IGNORECASE),
    "a date": re.compile(
        r"\b20\d\d-(?:0[1-9]|1[0-2])-(?:[0-2]\d|3[01])\b"
        r"|\b(?:January|February|March|April|May|June|July|August|September|October"
        r"|November|December) \d{1,2}, 20\d\d\b"
    ),
    "a session of work": re.compile(
        r"\b(?:first|second|third|\w+th|this|that|next|earlier|previous) session\b", re.IGNORECASE
    ),
    "a before / after table": re.compile(
        r"^\|[^\n]*\bbefore\b[^\n]*\|[^\n]*\bafter\b", re.IGNORECASE | re.MULTILINE
    ),
    "a verdict of a target": re.compile(r"\b(?:met|not met)\*\*|: \*\*(?:not )?met\b"),
}

# The documents the checks cover: every page but the generated conformance table (whose text
# is ONNX's case names and messages) is written by hand.
CHECKED = [path for path in DOCUMENTS if path.name != "conformance.md"]


@pytest.mark.parametrize("path", CHECKED, ids=lambda path: path.name)
def test_no_diary(path):
    text = path.read_text()
    found = []
    for what, pattern in FORBIDDEN.items():
        for match in pattern.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append(f"{path.name}:{line}: {what}: {match.group(0)!r}")
    assert not found, "\n".join(found)


def test_the_checks_catch_what_they_name():
    """Each pattern catches the diary it is meant for and lets ordinary prose through."""
    caught = {
        # built here, so this file does not itself read as the diary it describes
        "a path of a build machine": "measured in " + "/".join(("", "work", "cache-mut", "runs")),
        "a ticket number": " ".join(("the", "issue", "12", "target")),
        "a date": "### Measured 2026-12-03",
        "a session of work": " ".join(("### Fifteenth", "session:", "figures")),
        "a before / after table": "| benchmark | before | after |",
        "a verdict of a target": "target <= 50 ns: **met**",
    }
    ordinary = (
        "rtsoa.Session(max_devices=2) shares devices; the default cache is ~/.cache/rtsoa; "
        "`rtsoa lower model.onnx -o model.rtsoa`; a session of a model; "
        "| benchmark | figure | command |"
    )
    for what, sample in caught.items():
        assert FORBIDDEN[what].search(sample), what
        assert not FORBIDDEN[what].search(ordinary), what


# References the recipes and pages make to the code, in backticks: each must still exist.
# `rtsoa/ops/entry.py`: a file or directory of the repository (a `<placeholder>` is no path)
PATH_REFERENCE = re.compile(r"`((?:rtsoa|tests|asv_bench|datasets|docs|mutation)/[\w./-]*)`")
# `rtsoa.ops.library.op_addresses`: a module of rtsoa and a name it holds, or a key the code
# writes (`rtsoa.save_id`, a string of its source)
DOTTED_REFERENCE = re.compile(r"`(rtsoa(?:\.\w+)+)`")
# `name` (`file.py`, `name` in / of `file.py`, `file.py` `name`: a name the file holds
NAME_IN_FILE = re.compile(
    r"`(\w+)`,?\s+(?:\(|in\s+|of\s+)`([\w/.-]+\.py)`|`([\w/.-]+\.py)`\s+`(\w+)`"
)


def _module_file(parts):
    """The source of module `parts` (["rtsoa", "ops", "library"]) of this checkout, or None."""
    base = ROOT.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _holds(path, name):
    return re.search(rf"\b{re.escape(name)}\b", path.read_text()) is not None


def _written_by_the_code(key):
    return any(f'"{key}"' in path.read_text() for path in (ROOT / "rtsoa").rglob("*.py"))


def broken_references(text):
    """The code references of a Markdown text that name no file, module or name of this
    checkout."""
    broken = []
    for match in PATH_REFERENCE.finditer(text):
        if not (ROOT / match.group(1)).exists():
            broken.append(f"no file {match.group(1)}")
    for match in DOTTED_REFERENCE.finditer(text):
        parts = match.group(1).split(".")
        cut = next((k for k in range(len(parts), 0, -1) if _module_file(parts[:k])), None)
        found = cut is not None and (
            cut == len(parts) or _holds(_module_file(parts[:cut]), parts[cut])
        )
        if not found and not _written_by_the_code(match.group(1)):
            broken.append(f"no module or name {match.group(1)}")
    for match in NAME_IN_FILE.finditer(text):
        name, path = (match.group(1), match.group(2)) if match.group(1) else match.group(4, 3)
        if "/" not in path:
            continue  # a file named without its directory: the path check cannot find it
        if not (ROOT / path).is_file() or not _holds(ROOT / path, name):
            broken.append(f"{path} has no {name}")
    return broken


@pytest.mark.parametrize("path", [ROOT / "CONTRIBUTING.md", *CHECKED], ids=lambda path: path.name)
def test_code_references_exist(path):
    """Files, modules and names the recipes and pages point to exist (a rename or a removal
    leaves no stale pointer)."""
    broken = broken_references(path.read_text())
    assert not broken, f"{path.name}: " + "; ".join(broken)


def test_the_reference_check_catches_stale_names():
    text = (
        "`rtsoa/ops/entry.py` and `rtsoa.ops.library.op_addresses`, `OpDef` in "
        "`rtsoa/ops/registry.py`"
    )
    assert broken_references(text) == []
    stale = (
        "`rtsoa/ops/switch.py`, `rtsoa.ops.library.op_switch`, `rtsoa.nowhere`, `NoSuchDef` in "
        "`rtsoa/ops/registry.py`"
    )
    assert len(broken_references(stale)) == 4


def test_readme_is_a_front_page():
    """The README is the package's front page: short, with the two Quick start commands."""
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 300
    assert 'pip install -e ".[test]" && python -m pytest -q' in text
    assert "pip install . && rtsoa run datasets/random-10k.rtsoa" in text


def _perf_table():
    spec = importlib.util.spec_from_file_location(
        "perf_table", ROOT / "asv_bench" / "perf_table.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_performance_tables_are_generated():
    """docs/performance.md holds what `asv_bench/perf_table.py write` renders from the rows and
    the asv results kept in the repository: a figure edited by hand fails here."""
    perf_table = _perf_table()
    text = (ROOT / "docs" / "performance.md").read_text()
    assert text == perf_table.rewrite(text, perf_table._latest_results()), (
        "docs/performance.md differs from its rows: run `python asv_bench/perf_table.py write`"
    )


def test_every_figure_has_a_command_and_a_machine():
    perf_table = _perf_table()
    for row in perf_table.ROWS:
        assert row.area in perf_table.AREAS, row
        assert row.benchmark or row.command, f"{row.figure}: no benchmark or script"
        assert row.recorded, f"{row.figure}: no figure recorded"
    results = {}
    for area in perf_table.AREAS:
        for line in perf_table.render(area, results).splitlines()[2:]:
            figure, value, command, machine = line.strip("|").split(" | ")
            assert value and command and machine, line


def test_a_result_replaces_the_recorded_figure(tmp_path):
    """A row shows the newest asv result of its benchmark at its parameters, with the machine."""
    perf_table = _perf_table()
    machine = tmp_path / "box"
    machine.mkdir()
    (machine / "machine.json").write_text('{"cpu": "Some CPU", "num_cpu": "2", "os": "Linux"}')
    columns = ["result", "params", "version"]
    for date, value in ((1, 0.5), (2, 0.25)):  # the newer file wins
        result = {
            "commit_hash": f"{date:08d}abcdef",
            "date": date,
            "result_columns": columns,
            "results": {
                "bench_prepare.Prepare.time_prepare": [
                    [value, 9.0, 9.0],
                    [["'sequential'", "'topological'", "'priority'"]],
                    "v",
                ]
            },
        }
        (machine / f"{date}.json").write_text(json.dumps(result))
    results = perf_table._latest_results(tmp_path)
    rows = {row.figure: row for row in perf_table.ROWS if row.area == "prepare"}
    sequential = rows["prepare, 100k nodes / 1M edges, sequential"]
    assert perf_table.figure_of(sequential, results) == (
        "250 ms",
        "Some CPU, 2 CPUs, Linux",
        "00000002",
    )
    untouched = rows["a runtime with an unread extra part of 8 arrays / without"]
    assert perf_table.figure_of(untouched, results)[0] == untouched.recorded
