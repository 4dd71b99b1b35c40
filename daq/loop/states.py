"""The loop's state machine: what the rig is allowed to do, and which requests move it where.

    IDLE ──arm──► ARMED ──run──► RUNNING
     ▲  ◄─disarm─┘  ▲ ◄──stop─────┘ │
     │               └── experiment done
     └─────disarm (from RUNNING too)─┘

    any ──estop──► ESTOP        any but ESTOP ──trip──► FAULT
    FAULT / ESTOP ──reset──► IDLE

IDLE reads and records with every valve at its null voltage. ARMED drives the valves to hold the
position measured at the moment of arming (bumpless). RUNNING executes an experiment (or holds,
when none was given). FAULT and ESTOP null every valve in the cycle they are entered and stay
latched until an explicit `reset`: nothing clears them on its own, not even the condition going
away, because a rig engineer must see and acknowledge why the rig stopped.

The table is pure data so that the command handler can refuse a request with a reason without
asking the real-time thread, and the loop applies exactly the same rules.
"""

from __future__ import annotations

import enum


class State(enum.IntEnum):
    """Values are what the `state` column of a sample row holds: never renumber."""

    IDLE = 0
    ARMED = 1
    RUNNING = 2
    FAULT = 3
    ESTOP = 4


class Action(enum.IntEnum):
    ARM = 0
    DISARM = 1
    RUN = 2
    STOP = 3
    ESTOP = 4
    RESET = 5


#: States in which the valves are driven by a runner; everywhere else they sit at null.
LIVE_STATES = frozenset({State.ARMED, State.RUNNING})
#: States that only `reset` leaves.
LATCHED_STATES = frozenset({State.FAULT, State.ESTOP})

_TARGET: dict[Action, tuple[frozenset[State], State]] = {
    Action.ARM: (frozenset({State.IDLE}), State.ARMED),
    Action.DISARM: (frozenset({State.ARMED, State.RUNNING}), State.IDLE),
    Action.RUN: (frozenset({State.ARMED}), State.RUNNING),
    Action.STOP: (frozenset({State.RUNNING}), State.ARMED),
    Action.ESTOP: (frozenset(State), State.ESTOP),
    Action.RESET: (frozenset(LATCHED_STATES), State.IDLE),
}

_HINT: dict[Action, str] = {
    Action.ARM: "arm needs IDLE",
    Action.DISARM: "disarm needs ARMED or RUNNING",
    Action.RUN: "run needs ARMED (arm first)",
    Action.STOP: "stop needs RUNNING",
    Action.ESTOP: "",
    Action.RESET: "reset needs FAULT or ESTOP (nothing is latched)",
}


class TransitionError(ValueError):
    """A request that the current state does not allow; `reason` says why in plain words."""

    def __init__(self, action: Action, state: State, reason: str) -> None:
        super().__init__(reason)
        self.action = action
        self.state = state
        self.reason = reason


def next_state(state: State, action: Action) -> State:
    """The state `action` leads to from `state`, or raise `TransitionError` with the reason."""
    allowed, target = _TARGET[action]
    if state in allowed:
        return target
    if state in LATCHED_STATES:
        reason = f"{action.name.lower()} refused: {state.name} is latched; reset first"
    else:
        reason = f"{action.name.lower()} refused in {state.name}: {_HINT[action]}"
    raise TransitionError(action, state, reason)


def refusal(state: State, action: Action) -> str | None:
    """The reason `action` is refused in `state`, or None when it is allowed."""
    try:
        next_state(state, action)
    except TransitionError as exc:
        return exc.reason
    return None
