"""The controller's per-cycle maths as compiled code (numba) over preallocated arrays, for the
loop's compiled cycle (docs/loop.md, "The compiled cycle"). The Python classes in
`controller.laws`, `controller.pid`, `controller.trajectories` and `controller.runner` stay the
reference these must equal."""
