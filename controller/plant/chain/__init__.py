"""Serial revolute chains driven by hydraulic jacks and motors (the thesis's machine, seed 002).

A chain is described by the thesis's modified D-H parameters (§3.4, eq. 3.8); each joint is
driven by a rotary motor through a gear or by one or several jacks closing a triangle with the
two links it joins (§2.4). The jacks' cylinders and pistons are bodies with mass and inertia
whose motion follows from the joint angle (§4.3.3's minor links). `model` holds the
description, `rnea` the jitted Newton–Euler dynamics, `hydraulics` the chambers, valves and
integrator around them, `planar` today's 1- and 2-DOF plant as a chain, `profile` the loader
of `hw_profiles/sim-excavator.toml`.
"""
