from pathlib import Path

import pytest

from engine.cli import main as cli
from engine.native import build_info
from tests.conftest import HAS_GPU, ON_LAVAPIPE


def test_doctor_prints_hardware_build_and_patch_feature(model_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "CPU" in out and "RAM" in out
    assert build_info()["build_key"] in out and "patched" in out and "build-info" in out
    assert "default  installed" in out
    assert "None" not in out and "power:" in out  # "battery: None" said nothing


def test_models_remove_of_an_unknown_id_fails_and_says_which_exist(
    copied_model: Path, isolated_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(["models", "add", str(copied_model)]) == 0
    assert cli(["models", "remove", "no-such-model"]) == 1
    err = capsys.readouterr().err
    assert "no-such-model" in err and copied_model.stem in err
    assert cli(["models", "remove", copied_model.stem]) == 0
    assert "removed" in capsys.readouterr().out
    assert cli(["models"]) == 0
    assert copied_model.stem not in capsys.readouterr().out and copied_model.exists()


def test_models_add_rejects_a_non_gguf_with_a_clear_error(
    not_a_model: Path, isolated_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(["models", "add", str(not_a_model)]) == 2
    assert "not a GGUF model file" in capsys.readouterr().err
    assert cli(["models"]) == 0
    assert "no models yet" in capsys.readouterr().out


def test_models_add_and_list(copied_model: Path, isolated_data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["models", "add", str(copied_model)]) == 0
    assert cli(["models"]) == 0
    out = capsys.readouterr().out
    assert "copy" in out and "ok" in out


def test_terminal_chat_answers_and_quits_on_eof(model_path: Path) -> None:
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "engine.cli", "chat", "--model", str(model_path), "--temperature", "0", "--max-tokens", "16"],
        input="What is 2 + 2?\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-1000:]
    assert len(result.stdout.strip("> \n")) > 3  # the streamed answer
    assert "tok/s" in result.stderr


def test_terminal_chat_says_how_far_a_long_prompt_is_read(model_path: Path) -> None:
    """Issue 45: a long paste showed nothing until its first token; the terminal now says how far the
    reading is, on one line rewritten in place, which the answer then replaces."""
    import subprocess
    import sys

    paste = " ".join(f"Item {i}: the ferry from harbour {i % 9} left at {i % 12 + 1} o'clock." for i in range(90))
    result = subprocess.run(
        [sys.executable, "-m", "engine.cli", "chat", "--model", str(model_path), "--temperature", "0", "--max-tokens", "8"],
        input=f"Summarise this list: {paste}\n".encode(),
        capture_output=True,  # bytes: text mode would read each carriage return as a line break
        timeout=300,
    )
    err = result.stderr.decode()
    assert result.returncode == 0, err[-1000:]
    assert "\r[reading the prompt: 0 of " in err and "\r[reading the prompt: 512 of " in err
    assert "\r\033[K" in err  # the line goes before the answer starts
    assert len(result.stdout.decode().strip("> \n")) > 3


def test_terminal_chat_ctrl_c_stops_the_answer_not_the_engine(model_path: Path) -> None:
    """A terminal's Ctrl+C reaches the whole foreground process group: it must stop the streaming
    answer and leave the engine alive for the next question; /help is a command, not a prompt."""
    import os
    import queue
    import signal
    import subprocess
    import sys
    import threading
    import time

    proc = subprocess.Popen(
        [sys.executable, "-m", "engine.cli", "chat", "--model", str(model_path), "--temperature", "0", "--max-tokens", "1500"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's foreground job
        # ... with Ctrl+C's default action, as a terminal gives it: a suite started in the background
        # (`cmd &` in a script) ignores SIGINT, the child inherited that, and Python then ignores it
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.stdin and proc.stdout and proc.stderr
    out: queue.Queue[str] = queue.Queue()
    err: list[str] = []
    threading.Thread(target=lambda: [out.put(c) for c in iter(lambda: proc.stdout.read(1), "")], daemon=True).start()
    threading.Thread(target=lambda: err.extend(iter(proc.stderr.readline, "")), daemon=True).start()

    def read_for(seconds: float) -> str:
        got, end = "", time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                got += out.get(timeout=0.1)
            except queue.Empty:
                pass
        return got

    try:
        proc.stdin.write("Count from 1 to 300, one number per line.\n")
        proc.stdin.flush()
        streamed, end = "", time.monotonic() + 120
        while len(streamed) < 10 and time.monotonic() < end:  # the answer is streaming
            streamed += read_for(0.05)
        assert len(streamed) >= 10 and not any("tok/s" in line for line in err), "".join(err)[-1000:]
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl+C: to the CLI and everything in its group
        end = time.monotonic() + 60
        while not any("[stopped]" in line for line in err) and time.monotonic() < end:
            time.sleep(0.1)
        assert any("[stopped]" in line for line in err), "".join(err)[-1000:]
        read_for(0.5)
        proc.stdin.write("/help\n")
        proc.stdin.write("What is 2 + 2?\n")
        proc.stdin.flush()
        answer = read_for(15)
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
        text = "".join(err)
        assert "[error]" not in text and "worker" not in text.lower(), text[-1500:]
        assert "/new, /clear" in text  # /help answered by the CLI itself
        assert len(answer.strip("> \n")) > 3  # the engine survived and answered
    finally:
        if proc.poll() is None:
            proc.kill()


def test_chat_with_a_broken_model_exits_with_a_clear_error(truncated_model: Path) -> None:
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "engine.cli", "chat", "--model", str(truncated_model)],
        input="",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "truncated" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("driver", ["as-here", "no-vulkan-driver"])
def test_app_selftest_runs_every_installed_mode(model_path, driver: str) -> None:
    """What installers run after installing: `specee-chat --selftest` (here unfrozen). It names
    the backends the build ships; on a machine with no Vulkan driver (no ICD to load) the Vulkan
    module loads with no device, says why, and every mode runs on the CPU."""
    import json
    import os
    import subprocess
    import sys

    env = dict(os.environ)
    if driver == "no-vulkan-driver":
        env["VK_ICD_FILENAMES"] = "/nonexistent/no_icd.json"
        env.pop("GGML_VK_VISIBLE_DEVICES", None)
    out = subprocess.run(
        [sys.executable, "-m", "specee_entry", "--selftest"], capture_output=True, text=True, timeout=300, env=env
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    report = json.loads(out.stdout)
    assert report["ok"] and set(report["modes"]) == {"vanilla", "ngram", "eagle", "specee"}
    assert all(m["tokens"] > 0 for m in report["modes"].values())
    backends = {b["name"]: b for b in report["backends"]}
    assert backends["cpu"]["loaded"] and backends["cpu"]["devices"] == 1
    if not (HAS_GPU and not ON_LAVAPIPE):  # no real GPU here: lavapipe (tests opt in) is never the one used
        assert report["gpu"] is None
        assert report["why_no_gpu"], "a build or machine that offers no usable GPU must say why"
    if "vulkan" in backends and driver == "no-vulkan-driver":
        assert backends["vulkan"]["devices"] == 0
        assert any("vulkan" in why for why in report["why_no_gpu"])


def test_about_names_version_and_build(native_build: dict) -> None:
    from engine import __version__
    from engine.about import about_text, build_identity

    info = build_identity()
    assert info["version"] == __version__ and info["commit"] != "" and not info["frozen"]
    assert about_text().startswith(f"SpecEE Chat {__version__} (build ")
    key = build_info()["build_key"]
    assert f"native {key}" in about_text({"patched": True, "build_key": key})  # what the worker's Ready says


def test_terminal_chat_sets_generation_controls_and_attaches_files(model_path: Path, tmp_path: Path) -> None:
    """`specee chat` drives the window's per-chat controls and files through the same ChatSession
    (issue 23, items 15 and 17): flags and /set by the protocol's limits, /attach with the worker's
    count, clear refusals that lose nothing."""
    import subprocess
    import sys

    from tests.pdf_fixture import write_pdf

    pdf = write_pdf(tmp_path / "recipe.pdf", ["Mix flour and water.", "Bake for forty minutes."])
    (tmp_path / "blob.bin").write_bytes(bytes(range(256)) * 8)
    (tmp_path / "long.txt").write_text("bread " * 3000)
    base = [sys.executable, "-m", "engine.cli", "chat", "--model", str(model_path), "--ctx", "1024"]
    bad = subprocess.run([*base, "--top-p", "0"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "Top-p must be in (0, 1], got 0.0" in bad.stderr
    lines = [
        "/set temperature 9", "/set top_k 5", "/set", f"/attach {tmp_path / 'blob.bin'}",
        f"/attach {tmp_path / 'long.txt'}", f"/attach {pdf}", "How long does it bake?",
    ]  # fmt: skip
    result = subprocess.run(
        [*base, "--temperature", "0", "--max-tokens", "24", "--preset", "Concise"],
        input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    err = result.stderr
    assert result.returncode == 0, err[-1000:]
    assert "Temperature must be between 0 and 5, got 9.0" in err and "[top_k 5]" in err
    assert "temperature 0.0, top_p 0.95, top_k 5, min_p 0.05, repeat_penalty 1.1, max_tokens 24" in err
    assert "blob.bin is a binary file" in err
    assert "long.txt does not fit" in err and "1,024-token context leaves 1,000" in err
    assert "attached recipe.pdf · 2 pages" in err
    assert "tok/s" in err and len(result.stdout.strip("> \n")) > 3
