"""Figures the fuzzers and property tests measure about themselves (how many cases changed the
input, were refused, loaded, hit out of memory ...). `tests/conftest.py` prints them at the end
of the run, so `pytest -q` shows what a fuzzer really exercised, not only that it passed."""

REPORTS = {}  # test name -> list of lines, in the order the tests ran


def report(test, lines):
    """Record the figures of `test` (replacing an earlier report of the same test)."""
    REPORTS[test] = list(lines)


def counted(counter, limit=None):
    """`key: count` lines of a Counter, most frequent first (at most `limit`, then a rest)."""
    items = counter.most_common()
    shown = items if limit is None else items[:limit]
    lines = [f"  {count:6d}  {key}" for key, count in shown]
    rest = items[len(shown) :]
    if rest:
        lines.append(f"  {sum(count for _, count in rest):6d}  ({len(rest)} other kinds)")
    return lines
