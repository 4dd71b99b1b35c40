"""The interface every backend implements (simulator, NI-DAQmx, serial, composite).

Shaped after ros2_control's hardware interface: the loop owns the arrays, the backend fills them;
each call reports OK/ERROR instead of raising inside the cycle. See docs/architecture.md.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod

import numpy as np


class BackendError(RuntimeError):
    """A backend could not be opened or configured (raised outside the cycle only)."""


class BackendStatus(enum.IntEnum):
    OK = 0
    ERROR = 1


class Backend(ABC):
    """A source of input counts and a sink of D/A voltages at the loop rate."""

    #: True when `wait_next_cycle` blocks on a device clock (NI sample clock).
    paced_by_hardware: bool = False

    def __init__(self, n_inputs: int, n_outputs: int) -> None:
        self.n_inputs = n_inputs
        self.n_outputs = n_outputs
        # Per input channel: 0 = fine, nonzero = the backend could not read it this cycle.
        self.channel_fault = np.zeros(n_inputs, dtype=np.uint8)

    @abstractmethod
    def open(self) -> None:
        """Acquire and configure devices; raise BackendError with a clear message."""

    def start(self) -> None:  # noqa: B027 - optional hook, most backends need nothing here
        """Begin acquisition with outputs at null."""

    def warm_up(self) -> None:  # noqa: B027 - optional hook
        """Once after `start()`, before the first timed cycle: load or compile whatever the
        first cycle's reads and writes would (numba dispatch, lazy driver tables), without
        moving the plant or the outputs."""

    def wait_next_cycle(self) -> int:
        """Block until the next hardware sample clock; return the clocks missed since the last."""
        raise NotImplementedError(f"{type(self).__name__} is not paced by hardware")

    @abstractmethod
    def read(self, t: float, raw_out: np.ndarray) -> BackendStatus:
        """Fill `raw_out` (float64, one per input channel) with converter counts."""

    @abstractmethod
    def write(self, t: float, volts: np.ndarray) -> BackendStatus:
        """Send one D/A voltage per output channel."""

    @abstractmethod
    def write_null(self) -> None:
        """Every output to its null voltage now. Must not raise."""

    def write_power(self, level: int) -> BackendStatus:
        """Set the station's hydraulic power lines (`daq.station.power.Power`: pump line on
        for LOW and HIGH, high-stage line on for HIGH). Called on the rare cycle that changes
        the level (a `power` command, an e-stop), never per cycle. A backend without the lines
        ([hydraulics] absent, or not on this device) has nothing to switch: OK."""
        return BackendStatus.OK

    def write_shunt(self, mask: np.ndarray) -> BackendStatus:
        """Switch the pressure transducers' shunt calibration relays (`Channel.shunt`): `mask`
        holds a bool per input channel of this backend, in the caller's order, True = relay
        closed. Called on the rare cycle that changes them (a `shunt` command, and every state
        change, power change or e-stop, which open them all), never per cycle. A backend with
        nothing to switch answers OK to an all-off mask and ERROR to a request it cannot
        carry out."""
        return BackendStatus.ERROR if np.any(mask) else BackendStatus.OK

    @abstractmethod
    def close(self) -> None:
        """Outputs to null, then release devices. Idempotent."""

    def null_outputs_after_crash(self) -> str:
        """Called on a *fresh, unopened* instance in the service process after the loop process
        died without nulling (SIGKILL, a crash): open the outputs, write null, release them.
        Returns what was done, for the log and the fault event. Raises BackendError if the
        outputs cannot be reached. The default opens the whole backend, which a device whose
        owner process has died can always do; backends with a lighter way override it."""
        if self.n_outputs == 0:
            return "no outputs on this backend"
        self.open()
        try:
            self.write_null()
        finally:
            self.close()
        return f"{self.n_outputs} output(s) written to null through a fresh {type(self).__name__}"

    def between_cycles(self, t_next: float) -> None:  # noqa: B027 - optional hook
        """Real time, after a cycle's outputs are written and before the loop waits for the
        cycle at loop time `t_next`: work that belongs to the rig rather than to the loop. The
        simulator steps its plant to `t_next` here, as a physical rig moves while the loop
        sleeps, so that the cycle's read → write time is the loop's own (docs/loop.md, "The
        cycle's timing"). Hardware backends have nothing to do."""

    def advance(self, dt: float) -> None:
        """Virtual time only: move the plant on by `dt` seconds."""
        raise NotImplementedError(f"{type(self).__name__} has no virtual time")
