"""The ONNX conformance suites (the backend node suite the installed `onnx` generates, and the
pytorch-converted, pytorch-operator and simple case directories it ships) run through rtsoa,
each case in a worker process, judged as rtsoa/testing/conformance.py says. The known-failures
table (tests/data/conformance_known.csv) lists every case that does not pass and why; these
tests fail when a case's outcome is not the table's: a passing case that starts failing, or a
known failure that starts passing (update the table then, with the command below).

The default suite runs a deterministic quarter of the node cases (`conformance.in_subset`)
and every directory case; the whole suite is `pytest -m node_suite tests/test_conformance.py`.
Table and report, from the whole suite:

    python -m rtsoa.testing.conformance --onnxruntime --markdown docs/conformance.md \\
        --write-known tests/data/conformance_known.csv
"""

import numpy as np
import pytest

from rtsoa.testing import conformance, conformance_pool
from rtsoa.testing.conformance_worker import CRASH, PASS, TIMEOUT, WRONG, compare

UPDATE = (
    "if the change is intended, rewrite the table: python -m rtsoa.testing.conformance "
    "--onnxruntime --markdown docs/conformance.md --write-known tests/data/conformance_known.csv"
)


def _check_against_table(cases):
    results = conformance.run_cases(cases)
    known = conformance.read_known()
    changed = conformance.differences(results, known)
    assert not changed, "\n".join([*changed, UPDATE])
    return results


def test_the_default_subset_matches_the_known_failures_table():
    cases = conformance.cases_of(subset=True)
    node = [case for case in cases if case.suite == "node"]
    assert len(node) > 350  # a quarter of the ~1,900 node cases
    results = _check_against_table(cases)
    assert sum(result.status == PASS for result in results) > 0


@pytest.mark.node_suite
def test_the_whole_node_suite_matches_the_known_failures_table():
    results = _check_against_table(conformance.cases_of())
    listed = {key for key, (status, _) in conformance.read_known().items() if status != PASS}
    ran = {result.key for result in results}
    assert listed <= ran, f"the table lists cases no suite has: {sorted(listed - ran)[:20]}"


def test_the_table_lists_statuses_and_reasons():
    known = conformance.read_known()
    assert known
    for key, (status, reason) in known.items():
        assert status in ("refused", "error", "wrong", "crash", "timeout"), key
        assert reason, f"{key}: no reason"


def test_outputs_are_judged_by_dtype_shape_and_tolerance():
    x = np.array([1.0, 2.0, np.nan], np.float32)
    assert compare("y", x, x.copy(), 1e-3, 1e-7) is None
    assert "dtype" in compare("y", x.astype(np.float64), x, 1e-3, 1e-7)
    assert "shape" in compare("y", x[:2], x, 1e-3, 1e-7)
    assert "differ" in compare("y", x + np.float32(0.01), x, 1e-3, 1e-7)
    assert compare("y", x * np.float32(1.0001), x, 1e-3, 1e-7) is None
    ints = np.array([1, 2], np.int64)
    assert "differ" in compare("y", ints + 1, ints, 1.0, 1.0)  # integers: exactly
    assert compare("s", [ints, ints], [ints, ints], 0.0, 0.0) is None
    assert "sequence" in compare("s", [ints], [ints, ints], 0.0, 0.0)
    assert compare("o", None, None, 0.0, 0.0) is None
    assert compare("o", ints, None, 0.0, 0.0) is not None


def test_half_types_pass_within_two_rounding_steps_and_not_three():
    import ml_dtypes

    for dtype, step in ((ml_dtypes.bfloat16, 2.0**-9), (np.float16, 2.0**-12)):
        want = np.array([0.4], dtype)  # in [0.25, 0.5): one step is 2**-9 / 2**-12
        two = (want.astype(np.float64) + 2 * step).astype(dtype)
        three = (want.astype(np.float64) + 3 * step).astype(dtype)
        assert compare("y", two, want, 1e-3, 1e-7) is None
        assert "differ" in compare("y", three, want, 1e-3, 1e-7)


def test_fourier_outputs_pass_zeros_at_the_output_s_scale_only():
    # float32 noise at an exact zero of a line summing to 54 (test_dft_inverse's)
    want = np.array([54.0, 1.9073486e-07], np.float32)
    have = np.array([54.0, 3.0e-15], np.float32)
    assert "differ" in compare("y", have, want, 1e-3, 1e-7)
    assert compare("y", have, want, 1e-3, 1e-7, line_sums=True) is None
    # above one float32 step of 54 (6.4e-06): a real difference, even there
    wrong = np.array([54.0, 1.0e-5], np.float32)
    assert "differ" in compare("y", wrong, want, 1e-3, 1e-7, line_sums=True)


def _relu_request():
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    x_value = np.array([-1.0, 0.5, 2.0], np.float32)
    right = [([x_value], [np.maximum(x_value, 0)])]
    wrong = [([x_value], [x_value])]
    return model.SerializeToString(), right, wrong


def test_a_worker_that_dies_is_that_case_s_crash_and_the_run_goes_on():
    model, right, wrong = _relu_request()
    requests = [
        ("rtsoa", model, right, 1e-3, 1e-7),
        ("no such runtime", model, right, 1e-3, 1e-7),  # the worker raises and exits
        ("rtsoa", model, wrong, 1e-3, 1e-7),
        ("onnxruntime", model, right, 1e-3, 1e-7),
    ]
    results = conformance_pool.run_requests(requests, jobs=1)
    assert [status for status, _ in results] == [PASS, CRASH, WRONG, PASS]
    assert "exit code" in results[1][1]


def test_a_case_without_an_answer_in_time_is_a_timeout(monkeypatch):
    model, right, _ = _relu_request()
    monkeypatch.setattr(conformance_pool, "FIRST_CASE_SECONDS", 0.05)  # shorter than start-up
    results = conformance_pool.run_requests([("rtsoa", model, right, 1e-3, 1e-7)], jobs=1)
    assert results[0][0] == TIMEOUT


def test_the_subset_is_stable_and_cases_are_named_by_their_op():
    cases = conformance.node_cases()
    by_name = {case.name: case for case in cases}
    assert conformance.case_op(by_name["test_reduce_max_empty_set"]) == "ReduceMax"
    assert conformance.case_op(by_name["test_add_bcast"]) == "Add"
    chosen = {case.name for case in cases if conformance.in_subset(case)}
    assert chosen == {case.name for case in reversed(cases) if conformance.in_subset(case)}
    assert 0.2 < len(chosen) / len(cases) < 0.3  # about 1 in SUBSET_SHARE


def test_updating_the_table_rewrites_only_the_cases_run(tmp_path):
    table = tmp_path / "known.csv"
    table.write_text(
        "case,status,reason\n"
        "node/test_a,refused,op 'A' is not supported\n"
        "node/test_b,refused,op 'B' is not supported\n"
        "node/test_c,error,run: KernelError\n"
    )
    ran = [
        conformance.CaseResult("node", "test_a", "A", True, PASS, "", "", ""),
        conformance.CaseResult("node", "test_c", "C", True, WRONG, "y differs", "", ""),
        conformance.CaseResult("node", "test_d", "D", False, "refused", "op 'D'", "", ""),
    ]
    conformance.write_known(ran, table, keep=conformance.read_known(table))
    want = {
        "node/test_b": ("refused", "op 'B' is not supported"),
        "node/test_c": ("wrong", "y differs"),
        "node/test_d": ("refused", "op 'D'"),
    }
    assert conformance.read_known(table) == want
    # through the command line: a run of no case keeps every row
    conformance.main(["--case", "no-such-case", "--quiet", "--update-known", str(table)])
    assert conformance.read_known(table) == want
