"""The simulated rig (the default backend)."""

from daq.backends.sim.backend import SimBackend, sim_backend_class
from daq.backends.sim.faults import FaultSpec, FaultSpecError
from daq.backends.sim.rig import SimRig

__all__ = ["FaultSpec", "FaultSpecError", "SimBackend", "SimRig", "sim_backend_class"]
