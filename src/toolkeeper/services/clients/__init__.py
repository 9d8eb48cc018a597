"""Moving a person's MCP servers between their clients and toolkeeper: the one place that knows
where each client keeps its configuration and how it writes it.

`import_servers` merges a client's servers into toolkeeper's configuration file; `install` writes
toolkeeper's entry into the client's file (optionally moving the client's servers out) and keeps
a record of what it did; `uninstall` undoes that: it restores the backup while the file is as
install left it, else removes just toolkeeper's entry and puts back the servers it moved.

Every file is written whole or not at all (a temporary file beside it, then a rename), and every
client file is copied to `<file>.toolkeeper-backup-<time>` before it changes. A file reached
through a symbolic link (a dotfiles repository) is written where the link points, so the link
stays; a client file its owner made read-only is left alone unless the person forces the change,
and then stays read-only.

The parts: the clients and where their files are (`table`), JSONC (`jsonc`), a client's file as
read (`documents`), one entry converted (`entries`; a remote one in `remote`, an mcp-remote
bridge in `bridges`), toolkeeper's own file (`own_config`), import (`importing`), atomic writes
and backups (`files`), the entry a client starts toolkeeper by (`launch`), install's records
(`records`), `install`, `uninstall`, and the clients whose files start toolkeeper (`installed`).
"""

from toolkeeper.services.clients.documents import ClientDocument, read_client_file
from toolkeeper.services.clients.entries import (
    TOOLKEEPER_ENTRY,
    Conversion,
    convert_entry,
    convert_servers,
    is_toolkeeper_entry,
    variable_for_input,
)
from toolkeeper.services.clients.files import back_up, refuse_read_only, write_atomically, written_at
from toolkeeper.services.clients.importing import ImportResult, import_servers, source_document
from toolkeeper.services.clients.install import InstallResult, install
from toolkeeper.services.clients.installed import toolkeeper_entries
from toolkeeper.services.clients.jsonc import strip_jsonc
from toolkeeper.services.clients.launch import Launch, running_toolkeeper
from toolkeeper.services.clients.own_config import quietly_parsed, toolkeeper_config_path
from toolkeeper.services.clients.records import records_dir
from toolkeeper.services.clients.table import CLIENTS, Client, Place, client_file, client_named
from toolkeeper.services.clients.uninstall import UninstallResult, uninstall

__all__ = [
    "CLIENTS",
    "TOOLKEEPER_ENTRY",
    "Client",
    "ClientDocument",
    "Conversion",
    "ImportResult",
    "InstallResult",
    "Launch",
    "Place",
    "UninstallResult",
    "back_up",
    "client_file",
    "client_named",
    "convert_entry",
    "convert_servers",
    "import_servers",
    "install",
    "is_toolkeeper_entry",
    "quietly_parsed",
    "read_client_file",
    "records_dir",
    "refuse_read_only",
    "running_toolkeeper",
    "source_document",
    "strip_jsonc",
    "toolkeeper_config_path",
    "toolkeeper_entries",
    "uninstall",
    "variable_for_input",
    "write_atomically",
    "written_at",
]
