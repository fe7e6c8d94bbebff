"""`specee-chat`: open the window (or, in a frozen build, act as the engine worker)."""

from __future__ import annotations

import sys

from engine.client import FROZEN_WORKER_FLAG


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv if argv is None else argv)
    if FROZEN_WORKER_FLAG in argv[1:]:
        # A frozen installer has no separate Python: the app's own executable is the worker.
        from engine.worker.process import main as worker_main

        return worker_main()
    if "--selftest" in argv[1:]:
        from engine.selftest import run

        return run()
    if "--version" in argv[1:]:
        from engine import __version__

        print(f"SpecEE Chat {__version__}")
        return 0

    from PySide6.QtWidgets import QApplication

    from app.main_window import MainWindow
    from app.theme import apply_theme

    app = QApplication.instance() or QApplication(argv)
    app.setApplicationName("SpecEE Chat")
    app.setOrganizationName("SpecEE Chat")
    apply_theme(app)
    window = MainWindow()
    window.show()
    window.start_engine()
    return app.exec()


if __name__ == "__main__":
    sys.exit(main())
