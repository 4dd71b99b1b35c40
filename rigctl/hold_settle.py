"""Before a check moves the arm: is the hold at rest?

A P position hold on a valve-controlled cylinder can sit in a large-amplitude limit cycle beside
a stable equilibrium: after a hard excitation (the validation run's 3 Hz valve sine) on an oil
softer than the gains were set for, the reference rig's p = 2 V/rad hold rings at ~7 Hz,
±1.7°, the cap pressure swinging 0.2–7 MPa, while the same hold started near rest is stable
(docs/controller.md). A move started from that ringing trips the following-error interlock in
its first fifth of a second, so the tracking check would fault a rig that is healthy at rest.

`settle_hold` records `WINDOW_S` of the hold and measures each joint's swing. Where one swings
by more than `RINGING_FRACTION` of its following-error limit, the hold is taken off (disarm:
the valves at null seal the chambers, and the oil column's own damping stops the motion), the
rig left `REST_S` at rest, and armed again — a hold that starts at rest. If it still rings the
check is not run. Either way it is said in words: a hold that rings is a finding about the gains
(`rigctl tune`), not something to hide.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

import numpy as np

from daq.loop.states import State
from daq.recording.reader import read_run
from rigctl.tracking_check import joint_columns

#: Hold recorded per look, s of rig time.
WINDOW_S = 1.0
#: A joint rings when half its swing over the window exceeds this fraction of its base
#: following-error limit (3° on the reference rig: 0.75°; a held joint there moves < 0.1°).
RINGING_FRACTION = 0.25
#: Time left at rest with the valves at null before arming again, s of rig time.
REST_S = 2.0


class Session(Protocol):
    def command(self, cmd: str, args: dict[str, Any] | None = None) -> dict[str, Any]: ...


def _wait_rig_time(session: Session, seconds: float, timeout_s: float) -> None:
    """Until the loop's clock has moved `seconds` (real or virtual time alike)."""
    t0 = float(session.command("status")["t"])
    deadline = time.monotonic() + timeout_s
    while float(session.command("status")["t"]) < t0 + seconds:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the rig's clock did not advance {seconds:g} s in {timeout_s:g} s")
        time.sleep(0.01)


def hold_swing_deg(
    session: Session, timeout_s: float = 120.0, describe: dict[str, Any] | None = None
) -> dict[str, float]:
    """Per joint, half the peak-to-peak angle (degrees) over `WINDOW_S` of the ARMED hold,
    from a recording of it (kept beside the others, as every sample is). `describe`: the
    service's, if the caller has it."""
    joints, _, q_cols = joint_columns(describe or session.command("describe"))
    seq = int(session.command("status")["seq"])  # two looks in one second: names apart
    name = f"hold-check-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{seq}"
    path = session.command("record_start", {"name": name})["path"]
    try:
        _wait_rig_time(session, WINDOW_S, timeout_s)
    finally:
        session.command("record_stop")
    run = read_run(path)
    held = run.column("state") == State.ARMED
    if not held.any():
        raise ValueError(f"the hold was not running while it was recorded ({path})")
    out = {}
    for j, col in zip(joints, q_cols, strict=True):
        q = np.degrees(run.column(col)[held])
        out[j] = 0.5 * float(q.max() - q.min())
    return out


def _ringing(swing: dict[str, float], limits_deg: dict[str, float]) -> dict[str, float]:
    return {j: s for j, s in swing.items() if s > RINGING_FRACTION * limits_deg[j]}


def settle_hold(session: Session, timeout_s: float = 120.0, before: str = "the check") -> str:
    """Make sure the ARMED hold is at rest before `before` moves the arm. Returns "" when it
    was, else what was found and done; raises ValueError when re-arming from rest did not
    stop it (the check must not run)."""
    describe = session.command("describe")
    limits = {j["name"]: float(j["limits"]["following_error_deg"]) for j in describe["joints"]}
    ringing = _ringing(hold_swing_deg(session, timeout_s, describe), limits)
    if not ringing:
        return ""
    found = ", ".join(f"{j} ±{s:.2f}°" for j, s in ringing.items())
    allowed = ", ".join(f"±{RINGING_FRACTION * limits[j]:.2f}°" for j in ringing)
    session.command("disarm")
    _wait_rig_time(session, REST_S, timeout_s)
    session.command("arm")
    still = _ringing(hold_swing_deg(session, timeout_s, describe), limits)
    if still:
        again = ", ".join(f"{j} ±{s:.2f}°" for j, s in still.items())
        raise ValueError(
            f"tracking check not run: the hold rang before {before} ({found}; at rest under "
            f"{allowed}) and rang again when armed from rest ({again}): the hold's gains do "
            "not suit this rig (rigctl tune)"
        )
    return (
        f"the hold rang before {before} ({found}; at rest under {allowed}): disarmed "
        f"{REST_S:g} s (valves at null) and armed again from rest, where it is steady. A hold "
        "left in a limit cycle by a run has gains marginal for this rig (rigctl tune)"
    )
