"""`specee-chat` and the frozen installer's one executable (packaging/specee-chat.spec): the window, or
with a flag the engine worker, `specee serve`, the self-test or the version. A frozen build has no
separate Python, so the app's own executable is also its worker (engine/client.py FROZEN_WORKER_FLAG)
and its server (engine/serve/launcher.py FROZEN_SERVE_FLAG). This dispatcher sits outside app/ and
engine/ so that the app never imports the worker (the import contracts in pyproject.toml)."""

from __future__ import annotations

import sys

from engine.client import FROZEN_WORKER_FLAG
from engine.serve.launcher import FROZEN_SERVE_FLAG


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv if argv is None else argv)
    if FROZEN_WORKER_FLAG in argv[1:]:
        from engine.worker.process import main as worker_main

        return worker_main()
    if FROZEN_SERVE_FLAG in argv[1:]:
        from engine.cli import main as cli_main

        return cli_main(["serve", *(a for a in argv[1:] if a != FROZEN_SERVE_FLAG)])
    if "--selftest" in argv[1:]:
        from engine.selftest import run

        return run()
    if "--version" in argv[1:]:
        from engine import __version__

        print(f"SpecEE Chat {__version__}")
        return 0
    from app.main import main as window_main

    return window_main(argv)


if __name__ == "__main__":
    sys.exit(main())
