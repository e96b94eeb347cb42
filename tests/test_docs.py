"""The project's Markdown renders as written (issue 44, defect 5): every Markdown file -- README,
CONTRIBUTING, CHANGELOG, docs/** (the results reports included), datasets/README.md -- is parsed with
markdown-it (CommonMark, what GitHub renders) and

* every code fence is closed (an odd number of fences turns the rest of a page into code), and no
  fenced block swallows a Markdown heading (the symptom of fences paired wrongly);
* every relative link and image resolves to a file or folder of the checkout, and its ``#anchor``,
  where it points into a Markdown file, to a heading of that file (GitHub's slugs).

Also: docs/configuration.md is what tools/config_docs.py generates from the configs (slow: it composes
every option), and the README stays a manual (under ~300 lines).
"""

from __future__ import annotations

import re
import subprocess
import sys
from functools import cache
from pathlib import Path
from urllib.parse import unquote

import pytest
from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[1]
#: folders that hold no documentation of the project (build outputs, caches, run folders)
SKIP = {".git", ".venv", "venv", "outputs", "mlartifacts", "node_modules", ".pytest_cache", "cache", "__pycache__"}


def markdown_files() -> list[Path]:
    out = []
    for path in sorted(ROOT.rglob("*.md")):
        rel = path.relative_to(ROOT)
        if any(part in SKIP or part.startswith(".") for part in rel.parts[:-1]):
            continue
        out.append(path)
    return out


FILES = markdown_files()
_MD = MarkdownIt("commonmark").enable("table")


@cache
def _tokens(path: Path):
    return _MD.parse(path.read_text(encoding="utf-8"))


def slug(text: str) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped (hyphens, underscores kept), spaces -> '-'."""
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    """The anchors a Markdown file defines: its headings' slugs (repeats numbered -1, -2, ... as GitHub
    does) and explicit HTML ids / names."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    tokens = _tokens(path)
    for i, tok in enumerate(tokens):
        if tok.type == "heading_open":
            inline = tokens[i + 1]
            text = "".join(c.content for c in (inline.children or []) if c.type in ("text", "code_inline"))
            base = slug(text)
            n = seen.get(base, 0)
            out.add(base if n == 0 else f"{base}-{n}")
            seen[base] = n + 1
        if tok.type in ("html_block", "html_inline"):
            out.update(re.findall(r'(?:id|name)="([^"]+)"', tok.content))
    return frozenset(out)


def _links(tokens):
    for tok in tokens:
        if tok.children:
            yield from _links(tok.children)
        if tok.type == "link_open":
            yield tok.attrGet("href"), tok.map
        elif tok.type == "image":
            yield tok.attrGet("src"), tok.map


def link_problems(path: Path) -> list[str]:
    problems = []
    for href, _ in _links(_tokens(path)):
        if not href or re.match(r"^[a-z][a-z0-9+.-]*:", href, re.I):  # http:, https:, mailto:, ...
            continue
        target, _, anchor = href.partition("#")
        target = unquote(target)
        dest = path if not target else (path.parent / target).resolve()
        if not dest.exists():
            problems.append(f"{href}: no such file")
            continue
        if anchor and dest.suffix == ".md" and dest.is_file() and unquote(anchor) not in anchors(dest):
            problems.append(f"{href}: no heading #{anchor} in {dest.name}")
    return problems


def fence_problems(path: Path) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    problems = []
    for tok in _tokens(path):
        if tok.type != "fence":
            continue
        start, end = tok.map
        last = lines[end - 1].strip() if end - 1 < len(lines) else ""
        closed = end - start >= 2 and last.startswith(tok.markup[0] * len(tok.markup)) and set(last) <= {tok.markup[0]}
        if not closed:
            problems.append(f"line {start + 1}: the code fence {tok.markup}{tok.info} is never closed")
        if tok.info.strip().lower() not in ("markdown", "md"):
            for j, line in enumerate(tok.content.splitlines()):
                if re.match(r"^#{2,6} \S", line):
                    problems.append(
                        f"line {start + 2 + j}: a heading inside a code block ({line.strip()!r}): "
                        "fences paired wrongly?"
                    )
                    break
    return problems


def test_the_project_has_its_markdown_pages():
    names = {p.relative_to(ROOT).as_posix() for p in FILES}
    for required in (
        "README.md",
        "CONTRIBUTING.md",
        "CHANGELOG.md",
        "docs/configuration.md",
        "docs/performance.md",
        "docs/dlm.md",
        "docs/sweeps.md",
        "docs/results-and-reports.md",
        "docs/saved-models.md",
        "docs/training.md",
        "docs/results/README.md",
        "datasets/README.md",
    ):
        assert required in names


@pytest.mark.parametrize("path", FILES, ids=[p.relative_to(ROOT).as_posix() for p in FILES])
def test_markdown_fences_are_balanced(path):
    assert fence_problems(path) == []


@pytest.mark.parametrize("path", FILES, ids=[p.relative_to(ROOT).as_posix() for p in FILES])
def test_relative_links_resolve(path):
    assert link_problems(path) == []


def test_the_checks_catch_what_they_claim(tmp_path):
    """The README of issue 44: a stray closing fence turned every later section into code."""
    page = tmp_path / "page.md"
    page.write_text("# T\n\n## Tests\n\nmake test\n```\n\n## Layout\n\n```\ncode\n```\n\n## After\n\ntext\n")
    problems = fence_problems(page)
    assert any("never closed" in p for p in problems) and any("'## Layout'" in p for p in problems)
    page.write_text(
        "# T\n\n## Good one\n\n```bash\n# a comment\n```\n\n[a](#good-one) [b](#nope) [c](missing.md)"
        " [d](page.md#t) [e](https://example.org/x)\n"
    )
    _tokens.cache_clear()
    anchors.cache_clear()
    assert fence_problems(page) == []
    assert link_problems(page) == ["#nope: no heading #nope in page.md", "missing.md: no such file"]


def test_slugs_follow_github():
    assert slug("Checkpoints and `gpdlm resume`") == "checkpoints-and-gpdlm-resume"
    assert (
        slug("Do the papers' headline results hold? (measured here, reduced)")
        == "do-the-papers-headline-results-hold-measured-here-reduced"
    )
    assert (
        slug("DTC++ and PIC++: the inducing-input baselines (Table 1)")
        == "dtc-and-pic-the-inducing-input-baselines-table-1"
    )


def test_the_readme_is_a_manual():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 300
    for page in (
        "docs/configuration.md",
        "docs/performance.md",
        "CONTRIBUTING.md",
        "docs/results/README.md",
        "docs/reliability.md",
        "LICENSE",
        "CITATION.cff",
    ):
        assert page in readme, page


@pytest.mark.slow
def test_configuration_page_is_generated_from_the_configs():
    """docs/configuration.md == `python tools/config_docs.py`'s output (composes every config option, ~8 s)."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "config_docs.py"), "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr


def test_config_keys_file_names_only_keys_with_a_meaning():
    import yaml

    spec = yaml.safe_load((ROOT / "tools" / "config_keys.yaml").read_text())
    entries = spec["config_keys"] + spec["trainer_keys"]
    assert len(entries) >= 100
    assert all(e["keys"] and e["meaning"].strip() for e in entries)


def _config_docs():
    import importlib.util

    spec = importlib.util.spec_from_file_location("config_docs", ROOT / "tools" / "config_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_config_docs_defaults_come_from_the_options_and_unknown_keys_are_refused():
    cd = _config_docs()
    groups = {
        "model": {
            "dlm": {"model.variant": "joint", "model.jitter": 1e-6},
            "dlm_fixed": {"model.variant": "fixed", "model.jitter": 1e-6},
            "ssgp": {"model.num_frequencies": 20},
        }
    }
    choices = {"model": "dlm"}
    top = {"seed": 0}
    assert cd.default_of("model", choices, top, groups, {}) == "`dlm`"
    assert cd.default_of("seed", choices, top, groups, {}) == "0"
    assert cd.default_of("model.variant", choices, top, groups, {}) == "joint; fixed (dlm_fixed)"
    assert cd.default_of("model.jitter", choices, top, groups, {}) == "1e-6"
    assert cd.default_of("model.num_frequencies", choices, top, groups, {}) == "20 (ssgp)"
    assert cd.default_of("model.no_such_key", choices, top, groups, {}) is None  # render() then refuses the page
    assert cd._comments(ROOT / "conf" / "model" / "dlm.yaml")["num_inducing"] == "M"
