"""Child process for the signal exit-path tests: `rig-daq`'s real `main()` with the CallLog fake
backend, armed with a constant non-null valve command.

Usage: python exit_child.py LOG_FILE [rig-daq arguments…]
Prints ARMED once the valves are commanded; writes the backend's call log (one entry a line)
to LOG_FILE when the backend is closed, or at exit if it never is.
"""

from __future__ import annotations

import atexit
import sys
import threading
import time
from pathlib import Path
from typing import Any

import daq.backends.factory as factory
import daq.service.cli as service_mod
from daq.profile.schema import Profile
from tests.loop.fakes import CallLog, Constant

#: The line printed once armed (log lines on stderr share the pipe and may interleave).
ARMED = "<<valves commanded>>"


def main() -> int:
    log_file = Path(sys.argv[1])
    made: list[CallLog] = []

    def dump() -> None:
        if made and not log_file.exists():
            log_file.write_text("\n".join(made[0].calls) + "\n")

    class LoggedBackend(CallLog):
        def close(self) -> None:
            super().close()
            dump()

    def make_backend(profile: Profile) -> CallLog:
        made.append(LoggedBackend(profile))
        return made[0]

    class ArmedService(service_mod.Service):
        def start(self, *args: Any, **kw: Any) -> None:
            self.loop.hold = Constant(0.5)
            super().start(*args, **kw)
            req = self.loop.request("arm", timeout=30.0)
            if not req.ok:
                raise RuntimeError(f"arm: {req.reason}")
            threading.Thread(target=self._report_armed, daemon=True).start()

        def _report_armed(self) -> None:
            while not made[0].commanded():
                time.sleep(0.001)
            print(ARMED, flush=True)

    atexit.register(dump)
    factory.make_backend = make_backend  # type: ignore[assignment]
    service_mod.Service = ArmedService  # type: ignore[misc]
    return service_mod.main(sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
