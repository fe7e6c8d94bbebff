"""The docs stay true to the tree: every `specee ...` command they show exists (its subcommands are
real and `--help` lists its flags), every `make ...` target exists (`make -n` answers), every
`python -m MODULE` names a module of the repository, every relative link and its #anchor resolves,
and no in-house shorthand (a work session's number, a prompt subset's code name) is left unexplained.
Fast: no model, no worker; every `--help` page comes from one Python start-up."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCS = sorted([REPO / "README.md", *(REPO / "docs").rglob("*.md"), *(REPO / "native").glob("*.md"),
               *(REPO / "packaging").glob("*.md")])  # fmt: skip
README_MAX_LINES = 160  # a README read in a minute; the rest lives in docs/

FENCE = re.compile(r"^(```+|~~~+)[^\n]*\n(.*?)^\1[ \t]*$", re.M | re.S)
INLINE = re.compile(r"(`+)(.+?)\1", re.S)
SPECEE = re.compile(r"(?:^|(?<=[\s'\"(]))(?:[\w.~-]*/)*specee(?=[ \t]|$)(?P<rest>.*)", re.M)
MAKE = re.compile(r"(?:^|(?<=[\s'\"(]))make(?=[ \t])(?P<rest>.*)", re.M)
PYTHON_M = re.compile(r"python3? -m ([\w.]+)")
WORD = re.compile(r"^[a-z][a-z0-9-]*$")
ENDS = {"|", "||", "&&", ";", "&", ">", "<", "2>&1"}


def rel(path: Path) -> str:
    return str(path.relative_to(REPO))


def code_texts(text: str) -> Iterator[str]:
    """The shell a page shows: each line of its fenced blocks (continuations joined) and each inline span."""
    for block in FENCE.finditer(text):
        yield from block.group(2).replace("\\\n", " ").splitlines()
    yield from (span.group(2).replace("\n", " ") for span in INLINE.finditer(FENCE.sub("", text)))


def without_comment(line: str) -> str:
    return re.split(r"(?:^|\s)#", line, maxsplit=1)[0]


def words_of(rest: str) -> list[str]:
    try:
        tokens = shlex.split(rest)
    except ValueError:  # an unbalanced quote: a command shown inside `sh -c '...'`
        tokens = rest.split()
    out: list[str] = []
    group: list[str] | None = None  # `[list|add NAME URL|remove NAME]`: one word of choices, `list|add|remove`
    for token in tokens:
        if token in ENDS or token.startswith(("#", ">")):
            break
        if group is None and token.startswith("[") and not token.startswith("[-") and not token.endswith("]"):
            group = [token[1:]]
        elif group is not None:
            group.append(token)
        else:
            out.append(token)
        if group is not None and token.endswith("]"):
            alternatives = " ".join(group)[:-1].split("|")
            out.append("|".join(alt.split()[0] if alt.split() else "" for alt in alternatives))
            group = None
    return out


def commands(prog: re.Pattern[str]) -> list[tuple[str, list[str]]]:
    found = []
    for doc in DOCS:
        for code in code_texts(doc.read_text(encoding="utf-8")):
            for match in prog.finditer(without_comment(code)):
                found.append((rel(doc), words_of(match.group("rest"))))
    return found


# `specee PATH --help` for many paths in one Python start-up: `python -m engine.cli` run again per path
# (runpy, as `-m` does, so it follows the CLI wherever its module or package lives).
HELP_PAGES = """
import contextlib, io, json, runpy, sys
pages = {}
for path in json.loads(sys.argv[1]):
    out, sys.argv = io.StringIO(), ["specee", *path, "--help"]
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_module("engine.cli", run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as stop:
        code = stop.code or 0
    pages[" ".join(path)] = out.getvalue() if code == 0 else None
print(json.dumps(pages))
"""
_help: dict[tuple[str, ...], str | None] = {}


def fetch_help(paths: list[tuple[str, ...]]) -> None:
    missing = [p for p in dict.fromkeys(paths) if p not in _help]
    if not missing:
        return
    done = subprocess.run([sys.executable, "-c", HELP_PAGES, json.dumps(missing)], cwd=REPO, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, f"`specee --help` failed:\n{done.stderr[-2000:]}"
    pages = json.loads(done.stdout.strip().splitlines()[-1])
    _help.update({p: pages[" ".join(p)] for p in missing})


def specee_help(path: tuple[str, ...]) -> str:
    fetch_help([path])
    page = _help[path]
    assert page is not None, f"`specee {' '.join(path)} --help` does not answer"
    return page


def positional_choices(help_text: str) -> set[str]:
    """The `{a,b,c}` sets of the usage line that belong to a positional, not to a flag's value."""
    usage = help_text.split("\n\n", 1)[0]
    choices: set[str] = set()
    for match in re.finditer(r"\{([^{}]+)\}", usage):
        before = usage[: match.start()].rstrip("[ \n").split()
        if not (before and before[-1].lstrip("[").startswith("-") and not before[-1].endswith("]")):  # [--flag {a,b}]
            choices |= set(match.group(1).split(","))
    return choices


def is_subcommand(path: tuple[str, ...]) -> bool:
    return specee_help(path).startswith("usage: specee " + " ".join(path))


def check_specee(words: list[str]) -> list[str]:
    """What in one shown `specee ...` command does not exist: an unknown subcommand or choice, a flag its help lacks."""
    path: tuple[str, ...] = ()
    choice_taken = False
    flags, problems = [], []
    for word in words:
        if word.startswith("-"):
            flags.append(word.lstrip("[").rstrip("]").split("=", 1)[0])
            continue
        bare = word.strip("[]")
        options = bare.split("|")
        choices = positional_choices(specee_help(path))
        if choice_taken or not choices or not all(WORD.match(o) for o in options):
            choice_taken = True  # a free argument (a path, a name): what follows is not a subcommand
            continue
        unknown = [o for o in options if o not in choices]
        if unknown:
            problems.append(f"`specee {' '.join(path)}` has no {unknown} (it takes {sorted(choices)})")
            break
        if len(options) == 1 and is_subcommand((*path, bare)):
            path = (*path, bare)
        else:
            choice_taken = True
    help_text = specee_help(path)
    for flag in flags:
        if flag.startswith("--") and not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", help_text):
            problems.append(f"`specee {' '.join(path)}` has no flag {flag}")
    return problems


def test_every_specee_command_the_docs_show_exists() -> None:
    shown = commands(SPECEE)
    assert len(shown) > 50, "the docs show the specee commands: is the scan broken?"
    # the help pages the commands may need, in one Python start-up
    fetch_help([()] + [tuple(w for w in words[:n] if WORD.match(w)) for _, words in shown for n in (1, 2)])
    problems = [f"{doc}: `specee {' '.join(words)}`: {p}" for doc, words in shown for p in check_specee(words)]
    assert not problems, "\n".join(problems)


def test_every_make_target_the_docs_show_exists() -> None:
    if shutil.which("make") is None:
        pytest.skip("no make on this machine")
    shown = [(doc, words) for doc, words in commands(MAKE) if words]
    assert {"run", "test"} <= {w for _, words in shown for w in words}, "the README's two commands are not found"
    problems = []
    for doc, words in shown:
        targets = [w for w in words if "=" not in w and not w.startswith("-")]
        assigns = [w for w in words if "=" in w]
        done = subprocess.run(["make", "-n", *targets, *assigns], cwd=REPO, capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            problems.append(f"{doc}: `make {' '.join(words)}`: {done.stderr.strip()[-300:]}")
    assert not problems, "\n".join(problems)


def test_every_python_module_the_docs_run_exists() -> None:
    problems = []
    for doc in DOCS:
        for code in code_texts(doc.read_text(encoding="utf-8")):
            for module in PYTHON_M.findall(code):
                if module.split(".")[0] not in {"engine", "app", "tests", "native"}:
                    continue  # pip, venv, pytest: not ours
                base = REPO.joinpath(*module.split("."))
                if not (base.with_suffix(".py").is_file() or (base / "__main__.py").is_file()):
                    problems.append(f"{rel(doc)}: `python -m {module}`: no such module")
    assert not problems, "\n".join(problems)


LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def anchors(doc: Path) -> set[str]:
    """GitHub's anchors for a page's headings: lower case, punctuation dropped, spaces to hyphens, repeats numbered."""
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#{1,6}[ \t]+(.+?)[ \t]*#*$", FENCE.sub("", doc.read_text(encoding="utf-8")), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.replace("`", "").lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def test_every_relative_link_and_anchor_resolves() -> None:
    problems, links = [], 0
    for doc in DOCS:
        prose = INLINE.sub("", FENCE.sub("", doc.read_text(encoding="utf-8")))
        for target in LINK.findall(prose):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):
                continue  # https:, mailto: ...: not ours to check offline
            links += 1
            path_part, _, anchor = target.partition("#")
            dest = (doc.parent / path_part).resolve() if path_part else doc
            if not dest.exists():
                problems.append(f"{rel(doc)}: ({target}): {path_part} does not exist")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                problems.append(f"{rel(doc)}: ({target}): no heading #{anchor} in {rel(dest)}")
    assert links > 30, "the docs link to each other: is the scan broken?"
    assert not problems, "\n".join(problems)


def test_the_readme_is_read_in_a_minute_and_links_the_docs() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= README_MAX_LINES
    pages = {p.name for p in (REPO / "docs").glob("*.md")}
    assert {"user-guide.md", "acceleration.md", "server.md", "architecture.md", "measurements.md", "troubleshooting.md"} <= pages
    assert all(f"docs/{page}" in readme for page in pages), "a docs page the README does not link"


# A work session's number and a prompt subset's code name meant something only to those who were there.
SHORTHAND = re.compile(r"\b[Ss]top \d+\b|\bP\d{2,3}\b")


def test_no_unexplained_shorthand_in_docs_or_comments() -> None:
    files = [*DOCS, *(f for d in ("app", "engine", "native", "tests", "packaging") for f in (REPO / d).rglob("*")
                      if f.suffix in {".py", ".c", ".cpp", ".h", ".md"} and f.is_file())]  # fmt: skip
    hits = [f"{rel(f)}:{n}: {line.strip()}" for f in files for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1)
            if SHORTHAND.search(line)]  # fmt: skip
    assert not hits, "explain or remove:\n" + "\n".join(hits)
