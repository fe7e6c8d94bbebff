import sys

from engine.worker.process import main

sys.exit(main())
