"""On CI a skipped test fails the run (tests/conftest.py); locally a skip is listed, not hidden.

`.ci/run` runs with CI=true and installs gcc first, so the C-baseline tests, which skip without
gcc, must run there."""

from pathlib import Path

import pytest

_TESTS = Path(__file__).resolve().parent

SKIPPING = """
import pytest

def test_runs():
    pass

@pytest.mark.skipif(True, reason="no gcc here")
def test_needs_gcc():
    pass

@pytest.mark.may_skip_on_ci
@pytest.mark.skipif(True, reason="optional tool")
def test_optional():
    pass

@pytest.mark.xfail(reason="known")
def test_known_failure():
    assert False
"""


@pytest.fixture
def suite(pytester):
    """A small suite with this suite's conftest (and the figures module it imports)."""
    for name in ("conftest.py", "figures.py"):
        pytester.makepyfile(**{Path(name).stem: (_TESTS / name).read_text()})
    pytester.makeini("[pytest]\nmarkers =\n    may_skip_on_ci: may skip on CI\n")
    pytester.makepyfile(test_skipping=SKIPPING)
    return pytester


@pytest.mark.parametrize("variable", [("CI", "true"), ("RTSOA_STRICT_SKIPS", "1")])
def test_a_skip_fails_the_run_on_ci(suite, monkeypatch, variable):
    """Catches: the makereport hook dropped or not reading CI; a may_skip_on_ci test or an
    xfail turned into a failure too."""
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("RTSOA_STRICT_SKIPS", raising=False)
    monkeypatch.setenv(*variable)
    result = suite.runpytest("-rs")
    # a skipif fires in setup, so the failure is reported as an error; either fails the run
    result.assert_outcomes(passed=1, errors=1, skipped=1, xfailed=1)
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*test_needs_gcc was skipped (*no gcc here)*every test must run*"])


def test_locally_a_skip_is_listed(suite, monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("RTSOA_STRICT_SKIPS", raising=False)
    result = suite.runpytest("-rs")
    result.assert_outcomes(passed=1, skipped=2, xfailed=1)
    assert result.ret == 0
    result.stdout.fnmatch_lines(["SKIPPED*no gcc here*"])


def test_the_suite_lists_skips_and_ci_installs_gcc():
    """`-rs` is in the default options (so `pytest -q` shows skips), and .ci/run makes sure gcc
    is there before it runs the README's command."""
    root = _TESTS.parent
    assert "-rs" in (root / "pyproject.toml").read_text()
    ci = (root / ".ci" / "run").read_text()
    assert "gcc" in ci and 'pip install -e ".[test]" && python -m pytest -q' in ci
    assert 'pip install -e ".[test]" && python -m pytest -q' in (root / "README.md").read_text()
