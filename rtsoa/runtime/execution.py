"""Execution: a run of Main enqueued by `ModelExecutor.execute`.

What "asynchronous" means on the simulated device: kernels compute their results on the host
when they are launched, and the device's clocks model when the work would finish. `execute`
does all the host work at the call (inputs copied to device blocks, Main run, outputs copied
out) and returns an `Execution` whose device work is still pending on the device timeline:
`stream`'s clock has advanced, the host clock has not. `Execution.wait()` (or `result()`, or
`ModelExecutor.synchronize()`) advances the host clock to the run's completion, as a real
stream synchronisation would block. The arrays hold their values at return (the simulation
computes eagerly), but the API contract is the real one: outputs are valid after the wait.
"""

from rtsoa.runtime.forks import CALLS


class Execution:
    """An enqueued run: its outputs are valid after `wait()` (see the module docstring)."""

    def __init__(self, model, outputs, events, stream, iteration):
        self.model = model
        self.stream = stream
        self.iteration = iteration
        self._outputs = outputs
        self._events = events

    def done(self):
        """Has the run completed at the device's current host time?"""
        with CALLS, self.model.home.lock:
            return all(self.model.device.event_query(event) for event in self._events)

    def wait(self):
        """Block (advance the host clock) until the run has completed on the device. The
        events are reused by the executor's next run, so waiting on an older run waits for the
        newer one too (never less than needed)."""
        with CALLS, self.model.home.lock:
            for event in self._events:
                self.model.device.event_synchronize(event)
        return self

    def result(self):
        """wait(), then the outputs {name: array}."""
        self.wait()
        return self._outputs
