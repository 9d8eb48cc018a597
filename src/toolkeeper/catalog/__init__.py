"""The catalog: every downstream tool, once, with its identities.

Its names are imported from `catalog.py` when first asked for: the catalog's own modules (the
tokenizer's `tokens.py`, `identity.py`) are also used where no catalog is built, without the
checks `catalog.py` brings (JSON Schema and the SDK's types)."""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from toolkeeper.catalog.catalog import Catalog, CatalogTool, ServerTools, build_catalog

__all__ = ["Catalog", "CatalogTool", "ServerTools", "build_catalog"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from toolkeeper.catalog import catalog

    return getattr(catalog, name)
