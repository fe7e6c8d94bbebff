"""The peer suite's results (the JSON the plugin writes) as counts and a readable summary.

`python -m tests.peer_server.report RESULTS.json` prints it (e.g. for an issue's closing note).
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.peer_server.exclusions import REASONS


@dataclass
class Summary:
    collected: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)  # of the tests that are not excluded
    excluded: Counter[str] = field(default_factory=Counter)  # by reason
    unexpected: list[str] = field(default_factory=list)  # not excluded, and failed (or errored)
    newly_passing: list[str] = field(default_factory=list)  # excluded as pending, and passed (XPASS)
    skipped: list[str] = field(default_factory=list)  # not excluded, skipped by the test itself
    unmatched: list[str] = field(default_factory=list)  # exclusion keys that match no test
    servers_started: int = 0

    @property
    def passed(self) -> int:
        return self.outcomes["passed"]

    @property
    def failed(self) -> int:
        return len(self.unexpected)


def summarize(results: dict[str, Any]) -> Summary:
    s = Summary(servers_started=results.get("servers_started", 0), unmatched=list(results.get("unmatched_exclusions", [])))
    for name, entry in results["tests"].items():
        s.collected += 1
        outcome, reason = entry["outcome"], entry["exclusion"]
        if reason is not None:
            s.excluded[reason] += 1
            if outcome == "xpassed":
                s.newly_passing.append(name)
            continue
        s.outcomes[outcome] += 1
        if outcome in ("failed", "error", "not run"):
            s.unexpected.append(f"{name}: {outcome}: {entry['message']}")
        elif outcome == "skipped":
            s.skipped.append(f"{name}: {entry['message']}")
    return s


def format_summary(s: Summary) -> str:
    lines = [
        f"llama.cpp server tests against specee serve: {s.collected} collected, {s.passed} passed, {s.failed} failed,"
        f" {sum(s.excluded.values())} excluded, {len(s.skipped)} skipped by the test itself"
        f" ({s.servers_started} server starts)",
    ]
    for reason, n in s.excluded.most_common():
        lines.append(f"  excluded {n:4d} {reason}: {REASONS[reason].text}")
    lines += [f"  FAILED {x}" for x in s.unexpected]
    lines += [f"  NOW PASSES (excluded as pending: drop its entry) {x}" for x in s.newly_passing]
    lines += [f"  skipped {x}" for x in s.skipped]
    lines += [f"  exclusion key matching no test: {x}" for x in s.unmatched]
    return "\n".join(lines)


if __name__ == "__main__":
    print(format_summary(summarize(json.loads(Path(sys.argv[1]).read_text()))))
