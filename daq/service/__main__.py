"""`python -m daq.service …` is `rig-daq …`."""

import sys

from daq.service.cli import main

sys.exit(main())
