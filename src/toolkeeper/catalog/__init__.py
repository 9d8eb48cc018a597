"""The catalog: every downstream tool, once, with its identities."""

from toolkeeper.catalog.catalog import Catalog, CatalogTool, ServerTools, build_catalog

__all__ = ["Catalog", "CatalogTool", "ServerTools", "build_catalog"]
