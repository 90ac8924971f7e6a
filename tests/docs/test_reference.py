"""The documentation's references are generated from the code and cover all of it: every key of
the settings models (and of each platform's options, and MCP server entries) is in the
configuration reference, every command and subcommand in the CLI reference; the committed pages
are current; the site is built with --strict in CI, and --strict does fail on a broken link."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_docs_reference",
                                                  REPO / "docs" / "_hooks" / "reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen = _generator()


def _sections(markdown: str) -> dict[str, set[str]]:
    """Heading → the keys (first-column code spans) of the table under it."""
    out: dict[str, set[str]] = {}
    current = ""
    for line in markdown.splitlines():
        if line.startswith("#"):
            current = line.lstrip("#").strip()
            out.setdefault(current, set())
        elif line.startswith("| `"):
            out[current].add(line.split("`")[1])
    return out


def test_every_settings_key_is_in_the_configuration_reference() -> None:
    from geode.settings import Settings

    page = _sections(gen.config_markdown())
    # the top-level plain keys, and every section of Settings with every one of its keys
    assert set(gen.top_level_keys()) <= page["Top-level keys"]
    nested = 0
    for name, info in Settings.model_fields.items():
        model = gen._submodel(info.annotation)
        if model is None:
            continue
        table = next(h for h in page if re.fullmatch(rf"\[\[?{name}(\.[A-Z]+)?\]\]?", h))
        keys = {f.alias or n for n, f in model.model_fields.items()
                if gen._submodel(f.annotation) is None or gen._is_container(f.annotation)
                or f.default_factory is None}
        assert keys <= page[table], (table, keys - page[table])
        nested += 1
    assert nested >= 10  # model, providers, store, loop, ..., bindings, hooks, sandbox, computer


def test_every_platforms_channel_options_and_mcp_entries_are_in_the_reference() -> None:
    page = _sections(gen.config_markdown())
    for table, keys in gen.config_keys().items():
        heading = table or "Top-level keys"
        assert set(keys) <= page[heading], (heading, set(keys) - page[heading])
    for platform in ("telegram", "slack", "discord"):
        assert {"enabled", "catch_up_max_age_s", "lease_ttl_s"} <= page[f"[channels.{platform}]"]
    assert {"command", "url", "env", "timeout"} <= page["[mcp.servers.NAME]"]
    assert {"safety", "resource_keys", "trust_annotations"} <= page["[mcp.servers.NAME.policy]"]


def test_a_key_added_to_a_model_appears_without_touching_the_generator() -> None:
    from pydantic import BaseModel

    class Probe(BaseModel):
        #: what it is for
        brand_new_key: int = 3

    rows = list(gen.key_rows(Probe, "[probe]"))
    assert rows == ["| `brand_new_key` | integer | `3` | what it is for |"]


def test_every_command_and_subcommand_is_in_the_cli_reference() -> None:
    page = gen.cli_markdown()
    headings = {h.strip("` ") for h in re.findall(r"^#+ (.+)$", page, re.M)}
    commands = gen.cli_commands()
    assert set(commands) <= headings
    # the groups and their subcommands are all there, not just the top level
    for expected in ("geode run", "geode serve", "geode mcp list", "geode mcp serve",
                     "geode sessions show", "geode bindings add", "geode pairing approve",
                     "geode schedule add", "geode db upgrade", "geode queue drop", "geode init"):
        assert expected in commands, expected
    # every option of a command is a row: `geode run --json`, `geode mcp list --json`
    run = page.split("## `geode run`", 1)[1].split("\n## ", 1)[0]
    assert "`--json`" in run and "`--model`, `-m`" in run
    # readable types, never Typer's Python names
    assert "<bool>" not in page and "<str>" not in page


def test_the_committed_reference_pages_are_current() -> None:
    for path, text in ((gen.CONFIG_PAGE, gen.config_markdown()),
                       (gen.CLI_PAGE, gen.cli_markdown())):
        assert path.read_text(encoding="utf-8") == text, (
            f"{path.relative_to(REPO)} is stale: run `python docs/_hooks/reference.py`")


def test_ci_builds_the_site_strictly_with_the_generator_as_a_hook() -> None:
    ci = (REPO / ".ci" / "run").read_text()
    build = ci.index("mkdocs build --strict")
    assert build < ci.index("python3 -m pytest"), "the docs are built before the tests run"
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    assert config["strict"] is True
    assert "docs/_hooks/reference.py" in config["hooks"]
    assert config["theme"]["name"] == "material"


def _nav_pages(nav: list[object]) -> list[str]:
    out: list[str] = []
    for item in nav:
        if isinstance(item, dict):
            for value in item.values():
                out += _nav_pages(value) if isinstance(value, list) else [str(value)]
        else:
            out.append(str(item))
    return out


def test_every_page_in_the_nav_exists_and_every_page_is_in_the_nav() -> None:
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    pages = _nav_pages(config["nav"])
    docs = REPO / "docs"
    assert all((docs / p).is_file() for p in pages), [p for p in pages if not (docs / p).exists()]
    on_disk = {str(p.relative_to(docs)) for p in docs.rglob("*.md") if "_hooks" not in p.parts}
    assert on_disk <= set(pages), on_disk - set(pages)


def test_the_pages_speak_to_users_not_to_us() -> None:
    words = re.compile(r"\bseed\b|issue #?\d+|\bthis round\b|\bfifth pass\b|\bround before\b",
                       re.I)
    # the pages this site's maintainers write (the operations, replicas, validation, soak and
    # boundaries pages are written with the features they describe, and checked with them)
    others = {"operations/store-safety-and-spend.md", "operations/outages-and-readiness.md",
              "operations/restarts.md", "deployment/replicas.md",
              "reference/config-validation.md", "benchmarks/soak.md", "security/boundaries.md"}
    pages = [p for p in (REPO / "docs").rglob("*.md")
             if str(p.relative_to(REPO / "docs")) not in others]
    found = [f"{p.name}: {m.group(0)}" for p in pages
             for m in words.finditer(p.read_text(encoding="utf-8"))]
    found += [f"README.md: {m.group(0)}"
              for m in words.finditer((REPO / "README.md").read_text(encoding="utf-8"))]
    assert not found, found


@pytest.mark.timeout(120)
def test_strict_mode_fails_a_broken_link(tmp_path: Path) -> None:
    # the validation settings of mkdocs.yml, on a one-page site with a link to no page
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    site = tmp_path / "site"
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text("# Home\n\n[gone](missing.md)\n")
    small = {"site_name": "probe", "strict": True, "validation": config["validation"],
             "nav": [{"Home": "index.md"}]}
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(small))
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    broken = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--site-dir", str(site)],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=100)
    assert broken.returncode != 0 and "missing.md" in broken.stderr, broken.stderr
    (tmp_path / "docs" / "index.md").write_text("# Home\n")
    shutil.rmtree(site, ignore_errors=True)
    fixed = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--site-dir", str(site)],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=100)
    assert fixed.returncode == 0, fixed.stderr
