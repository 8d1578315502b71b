"""Eager against compiled, on the user's own model and data, and the choice between them.

Inside the job's training process, after the compiled steps have settled, the
session runs a few optimizer steps eager and compares them with the compiled
steps around them, on a fixed schedule of step numbers (the same on every
rank, whatever each rank compiled when). Five parts, one concern each:

- :mod:`.window`: the schedule (warm-up, compiled window A, eager window,
  compiled window B) and which steps count;
- :mod:`.rule`: the pure decision from the measured times, and when the eager
  window is skipped (memory);
- :mod:`.key`: the one decision key: everything that changes the answer (model,
  inputs, autocast, config, versions, device, world size, script);
- :mod:`.store`: decisions of earlier jobs in the compile cache, measured again
  every :data:`.rule.REMEASURE_AFTER` jobs;
- :mod:`.exchange`: every rank's figures through the c10d store, so the whole
  job decides on the slowest rank's numbers.

Standard library only at import.
"""

from __future__ import annotations

__all__: list[str] = []
