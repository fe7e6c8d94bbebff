import json
from collections import Counter
from pathlib import Path

import pytest

from engine.bench.prompts import DEV_PROMPTS, PromptFileError, load_prompts
from engine.bench.runner import run_bench
from engine.cli import main as cli


def test_dev_prompt_set_covers_every_category() -> None:
    prompts = load_prompts(DEV_PROMPTS)
    assert len(prompts) >= 80
    counts = Counter(p.category for p in prompts)
    for cat in ("writing", "roleplay", "open_qa", "summarization", "translation", "math", "coding", "retrieval"):
        assert counts[cat] >= 10, cat
    assert len({p.id for p in prompts}) == len(prompts)


def test_turns_entries_use_the_first_turn(tmp_path: Path) -> None:
    f = tmp_path / "p.jsonl"
    f.write_text('{"id": "a", "turns": ["first", "second"]}\n\n{"prompt": "solo"}\n')
    assert [p.text for p in load_prompts(f)] == ["first", "solo"]


@pytest.mark.parametrize("content", ["{bad json\n", '{"id": "x"}\n', ""])
def test_bad_prompt_files_name_the_problem(tmp_path: Path, content: str) -> None:
    f = tmp_path / "p.jsonl"
    f.write_text(content)
    with pytest.raises(PromptFileError, match=str(f)):
        load_prompts(f)


def test_bench_reports_speed_for_vanilla(model_path: Path) -> None:
    prompts = load_prompts(DEV_PROMPTS)[:3]
    report = run_bench(str(model_path), prompts, ["vanilla"], max_tokens=8, warmup=1, n_ctx=1024)
    (mode,) = report["modes"]
    assert mode["mode"] == "vanilla" and mode["prompts"] == 3
    assert mode["decode_tok_s_median"] > 0 and mode["prefill_tok_s_median"] > 0
    assert all(s["n_generated"] <= 8 and s["tokens"] for s in report["samples"]["vanilla"])


def test_cli_bench_writes_json(model_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.json"
    rc = cli(["bench", "--model", str(model_path), "--limit", "2", "--warmup", "0", "--max-tokens", "4", "--json", str(out)])
    assert rc == 0
    report = json.loads(out.read_text())
    assert report["modes"][0]["mode"] == "vanilla"
    assert "decode tok/s" in capsys.readouterr().out
