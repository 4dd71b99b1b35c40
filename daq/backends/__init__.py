"""Backends: the simulated rig and the hardware drivers behind one interface (`base.Backend`)."""
