from __future__ import annotations

import pytest

from daq.loop.states import Action, State, TransitionError, next_state, refusal


@pytest.mark.parametrize(
    ("state", "action", "target"),
    [
        (State.IDLE, Action.ARM, State.ARMED),
        (State.ARMED, Action.RUN, State.RUNNING),
        (State.RUNNING, Action.STOP, State.ARMED),
        (State.ARMED, Action.DISARM, State.IDLE),
        (State.RUNNING, Action.DISARM, State.IDLE),
        (State.FAULT, Action.RESET, State.IDLE),
        (State.ESTOP, Action.RESET, State.IDLE),
    ],
)
def test_allowed_transitions(state: State, action: Action, target: State) -> None:
    assert next_state(state, action) == target
    assert refusal(state, action) is None


@pytest.mark.parametrize("state", list(State))
def test_estop_is_accepted_from_every_state(state: State) -> None:
    assert next_state(state, Action.ESTOP) == State.ESTOP


@pytest.mark.parametrize(
    ("state", "action", "words"),
    [
        (State.IDLE, Action.RUN, "arm first"),
        (State.IDLE, Action.STOP, "needs RUNNING"),
        (State.IDLE, Action.RESET, "nothing is latched"),
        (State.ARMED, Action.ARM, "needs IDLE"),
        (State.RUNNING, Action.RUN, "needs ARMED"),
        (State.FAULT, Action.ARM, "latched; reset first"),
        (State.ESTOP, Action.RUN, "latched; reset first"),
        (State.FAULT, Action.DISARM, "latched"),
    ],
)
def test_invalid_transitions_are_refused_with_a_reason(
    state: State, action: Action, words: str
) -> None:
    with pytest.raises(TransitionError) as exc:
        next_state(state, action)
    assert words in exc.value.reason
    assert state.name in exc.value.reason
    assert refusal(state, action) == exc.value.reason
