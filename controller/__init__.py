"""Pure control code: the plant physics, control laws and excitation trajectories. No I/O."""
