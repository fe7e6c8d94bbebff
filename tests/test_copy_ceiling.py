"""engine.bench.copy_ceiling: the perfect-foresight bound on prompt-lookup drafting."""

import argparse

import pytest

from engine.bench.copy_ceiling import ceiling, cost_arg, hit_rates, relative_costs

FREE = dict.fromkeys(range(1, 18), 1.0)  # extra rows cost nothing
DEAR = {n: float(n) for n in range(1, 18)}  # n rows cost n one-row decodes


def test_an_answer_that_copies_the_prompt_is_drafted_whole_when_rows_are_free() -> None:
    prompt = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]
    answer = [2, 3, 4, 5, 6, 7, 8, 9, 10, 11]
    # answer[0] comes from the prefill; answer[1] is decoded (one row: the pair (.., 2) has no match
    # yet), then everything after it is one verify of the copied run
    assert ceiling(prompt, answer, FREE) == (len(answer) - 1) / 2


def test_no_match_or_dear_rows_is_plain_decoding() -> None:
    assert ceiling([1, 2, 3], [7, 8, 9, 10], FREE) == 1.0
    assert ceiling(list(range(1, 13)), list(range(2, 12)), DEAR) == 1.0


def test_a_wrong_continuation_is_not_drafted() -> None:
    prompt = [5, 6, 1, 5, 6, 2]  # (5, 6) last followed by 2, then by what the answer does not say
    assert ceiling(prompt, [5, 6, 9, 9], FREE) == 1.0


def test_relative_costs_interpolate_between_measured_sizes() -> None:
    cost = relative_costs({1: 10.0, 2: 15.0, 4: 20.0, 8: 30.0, 16: 60.0})
    assert cost[1] == 1.0 and cost[2] == 1.5 and cost[3] == 1.75 and cost[16] == 6.0
    assert cost[17] == 6.0 * 17 / 16


def test_a_given_cost_curve_is_parsed_or_refused_with_what_it_wants() -> None:
    assert cost_arg("2:1.5,4:2.0") == {1: 1.0, 2: 1.5, 4: 2.0}
    for bad in ("2=1.5", "2:x", "1:1.0", "2:-1"):
        with pytest.raises(argparse.ArgumentTypeError):
            cost_arg(bad)


def test_hit_rates_count_each_proposal_by_its_match_length_and_whether_earlier_occurrences_agree() -> None:
    # the answer repeats the prompt: (1, 2) once before, proposing 3 (a match of 2, right), then
    # (.., 1, 2, 3) proposing 4 (a match of 3, right)
    assert dict(hit_rates([1, 2, 3, 4], [1, 2, 3, 4])) == {("2", "one"): [1, 1], ("3", "one"): [1, 1]}
    # (7, 8) went on with 1 and then 2: the latest proposes 2, the answer says 3
    assert dict(hit_rates([7, 8, 1, 7, 8, 2], [7, 8, 3])) == {("2", "disagree"): [0, 1]}


def test_the_replay_takes_a_given_cost_curve_instead_of_measuring(tmp_path, model_path) -> None:
    """`--cost` replays a report under a curve measured elsewhere (docs/acceleration.md's), with no decode run."""
    import json
    import subprocess
    import sys

    answer = [504, 3049, 28, 504, 3049, 28, 504, 3049, 28, 2]
    sample = {"prompt_id": "writing-02", "tokens": answer, "decode_tok_s": 10.0}
    samples = {"vanilla": [sample], "ngram": [{**sample, "decode_tok_s": 11.0}]}
    (tmp_path / "r.json").write_text(json.dumps({"model": str(model_path), "threads": 2, "samples": samples}))
    cmd = [sys.executable, "-m", "engine.bench.copy_ceiling", str(tmp_path / "r.json"), "--cost", "2:1.5,4:2.0,16:6.0"]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "cost of n rows / one row here: 2: 1.50, 3: 1.75, 4: 2.00, 8: 3.33, 16: 6.00" in run.stdout
    assert "cost curve" not in run.stderr  # nothing was measured
    writing = next(line.split() for line in run.stdout.splitlines() if line.startswith("writing"))
    assert writing[1] == "1" and float(writing[2]) > 1.0 and writing[3] == "1.100"  # a repeated run copies
