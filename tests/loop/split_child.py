"""Child for the service-death tests: a `Service` with the loop in its own process, on a
`MirroredBackend`, armed with a constant non-null valve command; prints `ARMED <loop pid>` and
then waits to be killed or stopped.

Usage: python split_child.py MIRROR_FILE PROFILE RUN_DIR [record]
("record": it records from before the arm, the run file in RUN_DIR.)
"""

from __future__ import annotations

import sys
import threading

from daq.profile.loader import load_profile
from daq.service import Service
from tests.loop.fakes import Constant, MirroredFactory

ARMED = "<<armed>>"


def main() -> int:
    mirror, profile_path, run_dir = sys.argv[1:4]
    profile = load_profile(profile_path)
    service = Service(
        profile,
        None,
        loop_process=True,
        backend_factory=MirroredFactory(mirror),
        network=False,
        run_dir=run_dir,
    )
    service.loop.hold = Constant(0.5)
    service.start(record=sys.argv[4:5] == ["record"])
    req = service.loop.request("arm", timeout=30.0)
    if not req.ok:
        raise RuntimeError(f"arm: {req.reason}")
    print(ARMED, service.loop.pid, flush=True)  # type: ignore[union-attr]
    threading.Event().wait()  # until killed
    return 0


if __name__ == "__main__":
    sys.exit(main())
