"""The real-time loop: everything that runs on the 1 kHz path, and nothing else.

`cycle` (the `Loop`: wait, read, scale, interlocks, controller step, write, the row into the
ring), `commands` (its rare paths: commands, state changes, latching), `mailbox` (commands in),
`states`, `timing`, `interlocks`, `realtime` (SCHED_FIFO, affinity, mlockall), `feedback_map`
(channels → per-joint feedback and back). The service around it is `daq.service`.
"""

from daq.loop.cycle import DEFAULT_RING_CAPACITY, Loop, LoopError

__all__ = ["DEFAULT_RING_CAPACITY", "Loop", "LoopError"]
