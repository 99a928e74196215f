"""The random-model fuzzer: random small ONNX graphs over the supported ops
(`model_fuzz_cases.py`: random shapes with zero-size dimensions and broadcasting, random
dtypes, fused chains, unread outputs), lowered and run through the model API, judged by
onnxruntime AND onnx.reference; a few also through `rtsoa batch`.

Each model runs in the op fuzzer's worker process (`op_differential_worker.py`), so a crash
fails the test naming the model instead of killing the run. A model with a float ReduceMax
or ReduceMin is judged by the reference alone: onnxruntime skips a NaN there or not by its
position (the op fuzzer's rule too). A refusal at lowering or load (a
typed error) is accepted and counted; an error at run time, a crash, a hang or a different
answer from either oracle fails. Models: MODEL_FUZZ_CASES (default 40; `pytest -m large` runs
ten times as many with other seeds). The branch mix (ops, dtypes, zero-size, broadcasting,
outcomes) is printed at the end of the run.
"""

import hashlib
import json
import os
from collections import Counter

import numpy as np
import pytest
from figures import counted, report
from model_fuzz_cases import NAN_ORDERED, random_model
from test_op_differential import MAX_REPORTED, Worker, WorkerDied, compare

CASES = int(os.environ.get("MODEL_FUZZ_CASES", "40"))
ORACLES = ("onnxruntime", "reference")
BATCH_MODELS = 4  # models also run by `rtsoa batch`, against the model API's answers


@pytest.fixture(scope="module")
def worker():
    each = Worker()
    yield each
    each.close()


def _fuzz(seeds, worker, test):
    """Run the models of `seeds` against both oracles; returns ({seed: (case, rtsoa's outputs
    on its first feed, None where it refused)}, the branch mix)."""
    mix = Counter()
    failures = []
    answers = {}
    for seed in seeds:
        case = random_model(seed)
        mix.update(case.features)
        outcomes = []
        for oracle in ("reference",) if NAN_ORDERED in case.features else ORACLES:
            judged = case._replace(oracle=oracle)
            try:
                results = worker.run(judged)
            except WorkerDied as died:
                failures.append(f"{case.label}: the worker {died} in {died.step[0]}")
                break
            for feed, (mine, theirs) in zip(case.feeds, results, strict=True):
                outcomes.append(mine[0])
                if mine[0] == "error":
                    failures.append(f"{case.label}: run-time error {mine[1]}: {mine[2]}")
                    continue
                verdict, detail = compare(judged, mine, theirs)
                mix[f"verdict vs {oracle}: {verdict}"] += 1
                if verdict == "mismatch":
                    failures.append(f"{case.label} vs {oracle}: {detail}; {feed}")
        refused = "refused" in outcomes
        mix["refused at lowering or load" if refused else "ran"] += 1
        if outcomes and not refused and outcomes[0] == "ok":
            answers[seed] = (case, results[0][0][1])
    lines = [f"  {len(seeds)} models; what they held and how they fared:"] + counted(mix)
    report(f"test_model_fuzz.py::{test}", lines)
    shown = "\n".join(failures[:MAX_REPORTED])
    assert not failures, f"{len(failures)} failures, first ones:\n{shown}"
    return answers, mix


def test_random_models_agree_with_onnxruntime_and_the_reference(worker):
    _, mix = _fuzz(range(CASES), worker, "test_random_models_agree")
    assert mix["ran"] >= 0.8 * CASES, mix  # most models must run, not be refused
    for feature in ("float32", "float64", "int32", "int64", "zero-size", "broadcast"):
        assert mix[feature] > 0, f"no model with {feature}: {mix}"


def test_random_models_run_by_rtsoa_batch(worker, tmp_path):
    """A few of the models (judged again, as above) as `rtsoa batch` jobs."""
    answers, _ = _fuzz(range(3 * BATCH_MODELS), worker, "test_random_models_run_by_rtsoa_batch")
    assert len(answers) >= BATCH_MODELS, answers.keys()
    _check_batch(list(answers.values())[:BATCH_MODELS], tmp_path)


@pytest.mark.large
def test_random_models_agree_large(worker):
    _fuzz(range(10_000, 10_000 + 10 * CASES), worker, "test_random_models_agree_large")


def _check_batch(cases, tmp_path):
    """`rtsoa batch` on the models with their first feeds: each job ok, with the checksum of
    the outputs the model API gave (which agreed with both oracles)."""
    from rtsoa.batch import read_results
    from rtsoa.cli import main

    manifest = tmp_path / "jobs.jsonl"
    lines = []
    expected = {}
    for index, (case, outputs) in enumerate(cases):
        model = tmp_path / f"model{index}.onnx"
        model.write_bytes(case.model)
        inputs = tmp_path / f"inputs{index}.npz"
        np.savez(inputs, **case.feeds[0])
        lines.append(json.dumps({"path": str(model), "inputs": str(inputs), "job": f"m{index}"}))
        digest = hashlib.sha256()
        for name in sorted(outputs):
            digest.update(name.encode() + np.ascontiguousarray(outputs[name]).tobytes())
        expected[f"m{index}"] = int.from_bytes(digest.digest()[:8], "little")
    manifest.write_text("\n".join(lines) + "\n")
    out = tmp_path / "results.arrow"
    code = main(
        ["batch", "--manifest", str(manifest), "-o", str(out), "--no-progress", "--workers", "1"]
    )
    rows = read_results(out).to_pylist()
    assert code == 0, rows
    assert {row["job"]: (row["status"], row["checksum"]) for row in rows} == {
        job: ("ok", checksum) for job, checksum in expected.items()
    }, rows
