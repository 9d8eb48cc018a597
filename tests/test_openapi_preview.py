"""`toolkeeper openapi preview`, the real command: the tools a spec would become, what is skipped
and why, and one clear line for a spec that cannot be used."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

SPEC: dict[str, Any] = {
    "openapi": "3.0.3",
    "info": {"title": "Pet store", "version": "1"},
    "servers": [{"url": "https://pets.example.test/v1"}],
    "paths": {
        "/pets": {
            "get": {"operationId": "listPets", "summary": "List pets", "tags": ["pets"], "responses": {}},
            "post": {
                "operationId": "uploadPet",
                "requestBody": {"content": {"application/xml": {"schema": {"type": "object"}}}},
                "responses": {},
            },
        },
        "/pets/{petId}": {
            "parameters": [{"name": "petId", "in": "path", "required": True, "schema": {"type": "string"}}],
            "delete": {"summary": "Remove \x1b[31ma pet", "responses": {}},
            "put": {
                "operationId": "replacePet",
                "x-mcp-annotations": {"destructiveHint": True},
                "responses": {},
            },
        },
    },
}


def preview(*arguments: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("TOOLKEEPER_")}
    return subprocess.run(
        [sys.executable, "-m", "toolkeeper", "openapi", "preview", *arguments],
        cwd=cwd,
        env={**environment, "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_preview_lists_the_tools_with_their_hints_and_what_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "pets.yaml").write_text(yaml.safe_dump(SPEC))
    result = preview("pets.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    row = {
        line.split("│")[1].strip(): line for line in lines if line.startswith("│") and line.count("│") == 6
    }
    assert set(row) == {"listPets", "delete_pets_petId", "replacePet"}
    assert "List pets" in row["listPets"] and "ro idem open" in row["listPets"]
    assert "destructive idem open" in row["delete_pets_petId"]
    assert "Remove \\u001b[31ma pet" in row["delete_pets_petId"]  # made visible, not obeyed
    assert "destructive* idem open" in row["replacePet"]  # the spec's own hint, marked
    skipped = next(line for line in lines if "uploadPet" in line)
    assert "POST" in skipped and "application/xml" in skipped
    assert "server: https://pets.example.test/v1" in result.stdout


def test_preview_as_json_with_filters(tmp_path: Path) -> None:
    (tmp_path / "pets.json").write_text(json.dumps(SPEC))
    result = preview("pets.json", "--methods", "get,DELETE", "--exclude", "list*", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    assert shown["spec"] == str(tmp_path / "pets.json")
    assert [tool["name"] for tool in shown["tools"]] == ["delete_pets_petId"]
    assert shown["tools"][0]["hints"] == {
        "readOnlyHint": False,
        "destructiveHint": True,
        "idempotentHint": True,
        "openWorldHint": True,
    }
    assert shown["tools"][0]["arguments"] == ["petId"]
    reasons = {entry["operationId"]: entry["reason"] for entry in shown["skipped"]}
    assert reasons == {
        "listPets": "excluded: operationId list*",
        "uploadPet": "not included: methods GET, DELETE",
        "replacePet": "not included: methods GET, DELETE",
    }


def test_a_spec_that_cannot_be_used_is_one_line_and_exit_1(tmp_path: Path) -> None:
    broken = {**SPEC, "info": {"version": "1"}}
    (tmp_path / "broken.yaml").write_text(yaml.safe_dump(broken))
    result = preview("broken.yaml", cwd=tmp_path)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == f"error: spec {tmp_path / 'broken.yaml'}: info.title: required (a string)\n"

    missing = preview("missing.yaml", "--json", cwd=tmp_path)
    assert missing.returncode == 1 and missing.stdout == ""
    assert missing.stderr.startswith(f"error: spec {tmp_path / 'missing.yaml'}: cannot read ")
    assert missing.stderr.count("\n") == 1
