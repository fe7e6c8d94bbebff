"""`specee-chat`: open the window (or, in a frozen build, act as the engine worker)."""

from __future__ import annotations

import sys

from engine.client import FROZEN_WORKER_FLAG
from engine.serve.launcher import FROZEN_SERVE_FLAG


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv if argv is None else argv)
    if FROZEN_WORKER_FLAG in argv[1:]:
        # A frozen installer has no separate Python: the app's own executable is the worker.
        from engine.worker.process import main as worker_main

        return worker_main()
    if FROZEN_SERVE_FLAG in argv[1:]:
        # ... and the `specee serve` the window's Serve switch starts (engine/serve/launcher.py).
        from engine.cli import main as cli_main

        return cli_main(["serve", *(a for a in argv[1:] if a != FROZEN_SERVE_FLAG)])
    if "--selftest" in argv[1:]:
        from engine.selftest import run

        return run()
    if "--version" in argv[1:]:
        from engine import __version__

        print(f"SpecEE Chat {__version__}")
        return 0

    from PySide6.QtWidgets import QApplication

    from app.main_window import MainWindow
    from app.single_instance import SingleInstance
    from app.theme import apply_theme, startup_theme
    from engine.settings import load_settings

    app = QApplication.instance() or QApplication(argv)
    app.setApplicationName("SpecEE Chat")
    app.setOrganizationName("SpecEE Chat")
    instance = SingleInstance()
    if instance.signal_running():
        print("SpecEE Chat is already running: its window was brought to the front.", file=sys.stderr)
        return 0
    apply_theme(app, startup_theme(load_settings().theme))  # before any widget: no flash of the other theme
    window = MainWindow()
    instance.listen(lambda: (window.showNormal(), window.raise_(), window.activateWindow()))
    window.show()
    window.start_engine()
    if "--screenshot" in argv[1:]:
        _screenshot_then_quit(app, window, argv[argv.index("--screenshot") + 1])
    return app.exec()


def _screenshot_then_quit(app, window, path: str) -> None:  # type: ignore[no-untyped-def]
    """Installer smoke test: load, answer one question, save the window as PNG, quit."""
    from PySide6.QtCore import QTimer

    from engine import protocol as p

    window.sampling = p.Sampling.greedy(24)

    def ask() -> None:
        if not window.model_loaded:
            QTimer.singleShot(100, ask)
            return
        window.input.setPlainText("Say hello in one sentence.")
        window.send_message()
        QTimer.singleShot(100, done)

    def done() -> None:
        if window.request_id:
            QTimer.singleShot(100, done)
            return
        window.grab().save(path)
        window.close()
        app.quit()

    QTimer.singleShot(0, ask)
    QTimer.singleShot(120_000, app.quit)


if __name__ == "__main__":
    sys.exit(main())
