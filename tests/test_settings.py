from pathlib import Path

import pytest

from engine import protocol as p
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


def test_settings_take_the_engines_limits_and_modes(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    big = AppSettings(mode="ngram", n_threads=p.N_THREADS_MAX, n_ctx=p.N_CTX_MAX)
    save_settings(big, path)
    assert load_settings(path) == big
    for damaged in ('{"mode": "remote"}', '{"n_threads": true}', f'{{"n_ctx": {p.N_CTX_MAX + 1}}}', '{"last_model": 3}',
                    '{"kv_disk_gb": -1}', '{"kv_disk_gb": 2.5}', '{"kv_disk_gb": 100000}'):  # fmt: skip
        path.write_text(damaged)
        assert load_settings(path) == AppSettings(), damaged
    with pytest.raises(p.SettingsError, match="threads"):
        save_settings(AppSettings(n_threads=-1), path)


def test_theme_and_engine_persist_and_unknown_values_fall_back_alone(tmp_path: Path) -> None:
    from engine.settings import engine_remote, remote_engine_setting

    path = tmp_path / "settings.json"
    engine = remote_engine_setting("gpu-box", "Qwen/Qwen2.5-7B")
    assert engine == "remote:gpu-box/Qwen/Qwen2.5-7B" and engine_remote(engine) == ("gpu-box", "Qwen/Qwen2.5-7B")
    assert engine_remote("local") is None and engine_remote("remote:gpu-box/") is None
    saved = AppSettings(mode="ngram", theme="dark", engine=engine)
    save_settings(saved, path)
    assert load_settings(path) == saved
    # an older or hand-edited file: an unknown theme or engine falls back, the rest is kept
    path.write_text('{"mode": "ngram", "theme": "solarized", "engine": "remote:nameonly"}')
    assert load_settings(path) == AppSettings(mode="ngram", theme="system", engine="local")
    path.write_text('{"n_ctx": 2048, "theme": ["dark"], "engine": 7}')
    assert load_settings(path) == AppSettings(n_ctx=2048)
    path.write_text('{"mode": "vanilla"}')  # a file from before these fields
    assert load_settings(path) == AppSettings(mode="vanilla", theme="system", engine="local")
    with pytest.raises(p.SettingsError, match="theme"):
        save_settings(AppSettings(theme="blue"), path)
    with pytest.raises(p.SettingsError, match="engine"):
        save_settings(AppSettings(engine="gpu-box"), path)
