"""README.md's tables of env ids, inference backends and policies are generated from their
registries (``python -m policysim.docs_tables --write``); these tests fail when one drifts."""

from __future__ import annotations

import re

import pytest

from agent_models.llm.config import BACKENDS, BackendSpec, HFConfig
from policysim import docs_tables
from socialenv.envs.policy_registry import policy_names
from socialenv.envs.registration import ENV_IDS


def test_readme_tables_match_the_registries():
    stale = docs_tables.drifted(docs_tables.README.read_text())
    assert not stale, (
        f"README.md tables {stale} drifted: run python -m policysim.docs_tables --write"
    )


def test_a_new_registry_entry_shows_as_drift(monkeypatch: pytest.MonkeyPatch):
    text = docs_tables.README.read_text()
    monkeypatch.setitem(
        BACKENDS, "tgi", BackendSpec("example.tgi:TGIBackend", HFConfig, "llm", "a server")
    )
    assert docs_tables.drifted(text) == ["backends"]
    assert "| `tgi` | a server |" in docs_tables.render(text)


def test_tables_list_every_name():
    text = docs_tables.README.read_text()
    for name in (*BACKENDS, *policy_names(), *ENV_IDS):
        assert f"| `{name}` |" in text, name


def test_the_env_table_describes_exactly_the_registered_ids():
    text = docs_tables.README.read_text()
    table = text[text.index("| id | arms |") :].split("\n\n")[0]
    described = re.findall(r"^\| `(PolicySim-[^`]+)` \|", table, flags=re.M)
    assert described == list(ENV_IDS)


def test_cli_help_lists_come_from_the_registries():
    from typer.testing import CliRunner

    from policysim.cli import app
    from socialenv.scenarios.builtin import BUILTIN_SCENARIOS

    result = CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    words = set(result.output.replace(",", " ").replace(".", " ").split())
    for name in (*ENV_IDS, *policy_names(), *BACKENDS, *BUILTIN_SCENARIOS):
        assert name in words, name
    from policysim.cli import _PLACEHOLDERS

    assert not [key for key in _PLACEHOLDERS if key in result.output]
