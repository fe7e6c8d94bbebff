"""`python -m engine.cli ...`: the `specee` command without its console script."""

import sys

from engine.cli import main

sys.exit(main())
