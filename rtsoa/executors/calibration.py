"""Calibration: the runs an executor or a model makes before it is timed, while it still times
its plain runs to choose how it runs (a multithread executor's sharing plan under "auto",
`rtsoa.executors.multithread`; a model's intra-op pool, `rtsoa.runtime.resources.PartsChoice`).
`Executor.calibrate` and `ModelExecutor.calibrate` call `calibrate_with`; `rtsoa run --repeat`
calls them after its first run, so no trial run is counted among the ones it times."""

# The most plain runs `calibrate` makes: a multithread executor's plans timed CALIBRATION_RUNS
# times each (6 runs) and a model's intra-op pool trials (a first run and 4) in the same runs,
# with room to spare
CALIBRATION_LIMIT = 16


def calibrate_with(run, calibrating, counted, limit=CALIBRATION_LIMIT):
    """Call `run()` while `calibrating()` holds, at most `limit` times, stopping after a run
    that no choice counted (`counted()`, the runs the choices have seen, did not grow: runs
    with subscribers, a failed run, inputs of other shapes); returns how many runs it made."""
    runs = 0
    while calibrating() and runs < limit:
        seen = counted()
        run()
        runs += 1
        if counted() == seen:
            break
    return runs
