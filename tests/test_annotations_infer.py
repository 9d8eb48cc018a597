"""Inference over real tool names from public MCP servers (git, GitHub, filesystem, Nextcloud,
Slack, Postgres, memory, fetch, time), with the categories of ADR-017."""

from __future__ import annotations

import pytest

from toolkeeper.annotations.infer import infer, title_from_name, words

READ = {"readOnlyHint": True}
CREATE = {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": False}
UPDATE = {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False}
WRITE = {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": True}
DELETE = {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": True}
EXECUTE = {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False}

# (server, tool name, description as the server gives it, parameters, category, expected hints)
REAL_TOOLS = [
    # modelcontextprotocol/servers: git
    ("git", "git_status", "Shows the working tree status", ["repo_path"], "read", READ),
    (
        "git",
        "git_diff_unstaged",
        "Shows changes in the working directory that are not yet staged",
        [],
        "read",
        READ,
    ),
    ("git", "git_diff_staged", "Shows changes that are staged for commit", [], "read", READ),
    ("git", "git_log", "Shows the commit logs", ["repo_path", "max_count"], "read", READ),
    ("git", "git_show", "Shows the contents of a commit", ["revision"], "read", READ),
    ("git", "git_commit", "Records changes to the repository", ["message"], "create", CREATE),
    ("git", "git_add", "Adds file contents to the staging area", ["files"], "create", CREATE),
    ("git", "git_create_branch", "Creates a new branch from an optional base branch", [], "create", CREATE),
    ("git", "git_reset", "Unstages all staged changes", [], "write", WRITE),
    ("git", "git_checkout", "Switches branches", ["branch_name"], "write", WRITE),
    # github/github-mcp-server and the reference GitHub server
    ("github", "get_issue", "Get details of a specific issue", ["owner", "repo"], "read", READ),
    ("github", "list_issues", "List issues in a repository", [], "read", READ),
    ("github", "search_repositories", "Search for GitHub repositories", ["query"], "read", READ),
    ("github", "get_file_contents", "Get the contents of a file or directory", [], "read", READ),
    ("github", "create_issue", "Create a new issue in a GitHub repository", [], "create", CREATE),
    ("github", "add_issue_comment", "Add a comment to an existing issue", [], "create", CREATE),
    ("github", "create_pull_request", "Create a new pull request", [], "create", CREATE),
    ("github", "fork_repository", "Fork a GitHub repository", [], "create", CREATE),
    ("github", "push_files", "Push multiple files in a single commit", [], "create", CREATE),
    (
        "github",
        "update_issue",
        "Update an existing issue",
        ["owner", "repo", "issue_number"],
        "update",
        UPDATE,
    ),
    ("github", "merge_pull_request", "Merge a pull request", ["merge_method"], "update", UPDATE),
    (
        "github",
        "create_or_update_file",
        "Create or update a single file",
        ["path", "content", "sha"],
        "write",
        WRITE,
    ),
    # modelcontextprotocol/servers: filesystem
    ("filesystem", "read_text_file", "Read the complete contents of a file", ["path"], "read", READ),
    ("filesystem", "read_multiple_files", "Read the contents of multiple files", ["paths"], "read", READ),
    (
        "filesystem",
        "write_file",
        "Create a new file or completely overwrite an existing file",
        [],
        "write",
        WRITE,
    ),
    ("filesystem", "edit_file", "Make line-based edits to a text file", ["path", "edits"], "update", UPDATE),
    (
        "filesystem",
        "create_directory",
        "Create a new directory or ensure a directory exists",
        [],
        "create",
        CREATE,
    ),
    ("filesystem", "list_directory", "Get a detailed listing of all files", ["path"], "read", READ),
    ("filesystem", "directory_tree", "Get a recursive tree view of files and directories", [], "read", READ),
    ("filesystem", "move_file", "Move or rename files and directories", [], "update", UPDATE),
    ("filesystem", "search_files", "Recursively search for files and directories", [], "read", READ),
    ("filesystem", "get_file_info", "Retrieve detailed metadata about a file", [], "read", READ),
    ("filesystem", "list_allowed_directories", "Returns the list of directories", [], "read", READ),
    # cbcoutinho/nextcloud-mcp-server (the ADR's own examples)
    ("nextcloud", "nc_notes_search_notes", "Search notes by title or content", ["query"], "read", READ),
    ("nextcloud", "nc_notes_get_note", "Get a specific note by ID", ["note_id"], "read", READ),
    ("nextcloud", "nc_notes_create_note", "Create a new note", ["title", "content"], "create", CREATE),
    ("nextcloud", "nc_notes_update_note", "Update an existing note", ["note_id", "etag"], "update", UPDATE),
    ("nextcloud", "nc_notes_append_content", "Append content to an existing note", [], "create", CREATE),
    ("nextcloud", "nc_notes_delete_note", "Delete a note permanently", ["note_id"], "delete", DELETE),
    ("nextcloud", "nc_webdav_write_file", "Write content to a file", ["path", "content"], "write", WRITE),
    ("nextcloud", "nc_webdav_delete_resource", "Delete a file or directory", [], "delete", DELETE),
    ("nextcloud", "nc_calendar_list_calendars", "List all calendars", [], "read", READ),
    ("nextcloud", "check_logged_in", "Check if the user is logged in", [], "read", READ),
    ("nextcloud", "deck_create_card", "Create a card on a deck board", [], "create", CREATE),
    # modelcontextprotocol/servers-archived: slack
    ("slack", "slack_list_channels", "List public channels in the workspace", [], "read", READ),
    ("slack", "slack_post_message", "Post a new message to a Slack channel", [], "create", CREATE),
    ("slack", "slack_reply_to_thread", "Reply to a specific message thread", [], "create", CREATE),
    ("slack", "slack_add_reaction", "Add a reaction emoji to a message", [], "create", CREATE),
    ("slack", "slack_get_channel_history", "Get recent messages from a channel", [], "read", READ),
    ("slack", "slack_get_users", "Get a list of all users in the workspace", [], "read", READ),
    # modelcontextprotocol/servers-archived: postgres; memory; fetch; time
    ("postgres", "query", "Run a read-only SQL query", ["sql"], "read", READ),
    (
        "memory",
        "create_entities",
        "Create multiple new entities in the knowledge graph",
        [],
        "create",
        CREATE,
    ),
    ("memory", "delete_observations", "Delete specific observations from entities", [], "delete", DELETE),
    ("memory", "read_graph", "Read the entire knowledge graph", [], "read", READ),
    (
        "fetch",
        "fetch",
        "Fetches a URL from the internet and optionally extracts its contents",
        [],
        "read",
        READ,
    ),
    ("time", "get_current_time", "Get current time in a specific timezones", ["timezone"], "read", READ),
    # execution
    ("shell", "run_command", "Run a shell command", ["command"], "execute", EXECUTE),
    ("puppeteer", "puppeteer_evaluate", "Execute JavaScript in the browser console", [], "execute", EXECUTE),
]


def _tool(name: str, description: str, parameters: list[str]) -> dict:
    return {
        "name": name,
        "description": description,
        "inputSchema": {"type": "object", "properties": {p: {"type": "string"} for p in parameters}},
    }


def test_the_table_is_large_enough() -> None:
    assert len(REAL_TOOLS) >= 40
    assert {server for server, *_ in REAL_TOOLS} >= {
        "git",
        "github",
        "filesystem",
        "nextcloud",
        "slack",
        "postgres",
    }


@pytest.mark.parametrize(("server", "name", "description", "parameters", "category", "expected"), REAL_TOOLS)
def test_category_and_hints(
    server: str, name: str, description: str, parameters: list[str], category: str, expected: dict
) -> None:
    inference = infer(_tool(name, description, parameters))
    assert inference.category == category, (name, inference)
    hints = {h: s.value for h, s in inference.suggestions.items() if h in expected}
    assert hints == expected, name
    for hint in expected:
        assert inference.suggestions[hint].reason, "every inferred value carries a reason"


def test_update_with_an_etag_says_why_it_is_not_idempotent() -> None:
    with_etag = infer(_tool("nc_notes_update_note", "Update a note", ["note_id", "etag"]))
    assert with_etag.suggestions["idempotentHint"].value is False
    assert "'etag'" in with_etag.suggestions["idempotentHint"].reason
    without = infer(_tool("update_issue", "Update an issue", ["issue_number"]))
    assert "not assumed idempotent" in without.suggestions["idempotentHint"].reason


def test_a_list_of_verbs_gets_the_worst_case_of_each_hint() -> None:
    inference = infer(_tool("manage_files", "Read, append, replace, or delete file contents.", ["action"]))
    hints = {h: s.value for h, s in inference.suggestions.items() if h != "title"}
    # not read-only (some actions write), destructive (replace, delete), not idempotent (append)
    assert hints == {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False}
    assert "read, append, replace or delete" in inference.suggestions["destructiveHint"].reason


def test_unknown_verbs_suggest_nothing() -> None:
    inference = infer(_tool("convert_time", "Convert time between timezones", ["time"]))
    assert inference.category is None
    assert set(inference.suggestions) == {"title"}


def test_open_world_from_name_or_description() -> None:
    assert infer(_tool("web_search", "Search", [])).suggestions["openWorldHint"].value is True
    fetch = infer(_tool("fetch", "Fetches a URL from the internet", []))
    assert fetch.suggestions["openWorldHint"].reason.startswith("the description mentions")
    assert "openWorldHint" not in infer(_tool("search_notes", "Search notes", [])).suggestions


@pytest.mark.parametrize(
    ("name", "title"),
    [
        ("nc_notes_create_note", "Create Note"),
        ("nc_webdav_list_directory", "List Directory"),
        ("deck_create_card", "Create Card"),
        ("append_to_note", "Append to Note"),
        ("list_categories", "List Categories"),
        ("getHTTPResponse", "Get HTTP Response"),
        ("listOpenPRs", "List Open PRs"),
        ("get_user_by_id", "Get User by ID"),
        ("fetch-url", "Fetch URL"),
        ("git_status", "Git Status"),
        ("query", "Query"),
    ],
)
def test_titles_from_names(name: str, title: str) -> None:
    suggestion = title_from_name(name)
    assert suggestion is not None and suggestion.value == title
    assert name in suggestion.reason


def test_title_reason_names_the_dropped_namespace() -> None:
    suggestion = title_from_name("nc_notes_create_note")
    assert suggestion is not None and "'nc_notes'" in suggestion.reason


def test_words_split_snake_kebab_camel_and_dots() -> None:
    assert words("nc_notes-createNote.v2") == ["nc", "notes", "create", "Note", "v", "2"]
    assert words("getHTTPResponse") == ["get", "HTTP", "Response"]


def test_a_declared_title_gets_no_title_suggestion() -> None:
    assert "title" not in infer({**_tool("create_note", "Create", []), "title": "New Note"}).suggestions
