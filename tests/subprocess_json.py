"""Run Python source in a fresh interpreter and read the JSON its last output line prints."""

import json
import subprocess
import sys


def run_json(code, *args, env=None, timeout=600):
    """`python -c code args...`; asserts it exits 0 (showing its stderr otherwise) and returns
    the JSON of its last line of output."""
    done = subprocess.run(
        [sys.executable, "-c", code, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])
