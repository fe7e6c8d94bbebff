from pathlib import Path

import pytest

from engine.settings import AppSettings, load_settings, save_settings


def test_settings_round_trip_and_damaged_files_fall_back_to_defaults(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    assert load_settings(path) == AppSettings()
    save_settings(AppSettings(mode="vanilla", n_threads=2, n_ctx=2048), path)
    assert load_settings(path) == AppSettings(mode="vanilla", n_threads=2, n_ctx=2048)
    path.write_text("{not json")
    assert load_settings(path) == AppSettings()
    path.write_text('{"mode": "warp-speed"}')
    assert load_settings(path) == AppSettings()
    with pytest.raises(ValueError, match="context length"):
        save_settings(AppSettings(n_ctx=10), path)
