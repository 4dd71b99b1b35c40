"""Child process for the signal exit-path tests: `rig-daq`'s real `main()` with the CallLog fake
backend, armed with a constant non-null valve command.

Usage: python exit_child.py LOG_FILE [rig-daq arguments…]
Prints ARMED once the valves are commanded; writes the backend's call log (one entry a line)
to LOG_FILE when the backend is closed.

The backend lives in the loop process (issue 15), which `spawn` starts from this module
(`__mp_main__`): the factory and the backend class are module level, and the backend reports
through files (LOG_FILE, and LOG_FILE + ".armed" once it has been commanded).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

import daq.backends.factory as factory
import daq.service.cli as service_mod
from daq.backends.base import BackendStatus
from daq.profile.schema import Profile
from tests.loop.fakes import CallLog, Constant

#: The line printed once armed (log lines on stderr share the pipe and may interleave).
ARMED = "<<valves commanded>>"
LOG_ENV = "EXIT_CHILD_LOG"


class LoggedBackend(CallLog):
    def __init__(self, profile: Profile) -> None:
        super().__init__(profile)
        self.log_file = Path(os.environ[LOG_ENV])

    def write(self, t: float, volts: np.ndarray) -> BackendStatus:
        status = super().write(t, volts)
        if self.calls and self.calls[-1] == "cmd":
            armed = self.log_file.with_suffix(".armed")
            if not armed.exists():
                armed.touch()
        return status

    def close(self) -> None:
        super().close()
        self.log_file.write_text("\n".join(self.calls) + "\n")


def make_backend(profile: Profile) -> CallLog:
    return LoggedBackend(profile)


def main() -> int:
    log_file = Path(sys.argv[1])
    os.environ[LOG_ENV] = str(log_file)

    class ArmedService(service_mod.Service):
        def start(self, *args: Any, **kw: Any) -> None:
            self.loop.hold = Constant(0.5)
            super().start(*args, **kw)
            req = self.loop.request("arm", timeout=30.0)
            if not req.ok:
                raise RuntimeError(f"arm: {req.reason}")
            threading.Thread(target=self._report_armed, daemon=True).start()

        def _report_armed(self) -> None:
            while not log_file.with_suffix(".armed").exists():
                time.sleep(0.001)
            print(ARMED, flush=True)

    factory.make_backend = make_backend  # type: ignore[assignment]
    service_mod.Service = ArmedService  # type: ignore[misc]
    return service_mod.main(sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
