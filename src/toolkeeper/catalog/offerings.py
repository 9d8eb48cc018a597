"""Everything besides tools that downstream servers offer: resources, resource templates, prompts.

Like the tool catalog, `Offerings` is an immutable snapshot rebuilt when a server's lists or
state change, so routing a request is a lookup.

- Resource URIs are not rewritten: a client reads the URI the server gave. A table maps each
  listed URI to its server; a URI two servers offer is served by the first in config order
  (with a warning). A URI nobody listed is matched against the resource templates, then by
  scheme against what each server listed.
- Prompt names get the tools' naming (`prefix__name`, hash suffix on a collision), so with
  `prefix: ""` they are unchanged.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from toolkeeper.catalog.identity import assign_exposed_names

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ServerOfferings:
    """What the offerings need to know of one downstream server."""

    server: str
    prefix: str
    available: bool
    resources: Sequence[dict[str, Any]]
    resource_templates: Sequence[dict[str, Any]]
    prompts: Sequence[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class PromptRoute:
    server: str
    name: str  # the downstream's own name


@dataclass(frozen=True, slots=True)
class TemplateRoute:
    template: str
    pattern: re.Pattern[str]
    server: str


@dataclass(frozen=True)
class Offerings:
    resources: tuple[dict[str, Any], ...] = ()
    resource_templates: tuple[dict[str, Any], ...] = ()
    prompts: tuple[dict[str, Any], ...] = ()
    resource_owners: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    template_routes: tuple[TemplateRoute, ...] = ()
    prompt_routes: Mapping[str, PromptRoute] = field(default_factory=lambda: MappingProxyType({}))
    # URI scheme -> the first server (config order) that listed a resource or template with it.
    scheme_owners: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def owner_of(self, uri: str) -> str | None:
        """The server that serves `uri`: listed, else a matching template, else by scheme."""
        owner = self.resource_owners.get(uri)
        if owner is not None:
            return owner
        for route in self.template_routes:
            if route.pattern.fullmatch(uri):
                return route.server
        return self.scheme_owners.get(_scheme(uri))

    def owner_of_template(self, template: str) -> str | None:
        for route in self.template_routes:
            if route.template == template:
                return route.server
        return self.owner_of(template)


def build_offerings(servers: Iterable[ServerOfferings]) -> Offerings:
    servers = list(servers)
    resources: list[dict[str, Any]] = []
    templates: list[dict[str, Any]] = []
    owners: dict[str, str] = {}
    template_routes: list[TemplateRoute] = []
    schemes: dict[str, str] = {}
    for s in servers:
        for resource in s.resources:
            uri = str(resource.get("uri"))
            if uri in owners:
                if owners[uri] != s.server:
                    logger.warning(
                        "resource %s is offered by %r and %r; %r serves it (first in the configuration)",
                        uri,
                        owners[uri],
                        s.server,
                        owners[uri],
                    )
                continue
            owners[uri] = s.server
            schemes.setdefault(_scheme(uri), s.server)
            if s.available:
                resources.append(resource)
        for template in s.resource_templates:
            text = str(template.get("uriTemplate"))
            if any(route.template == text for route in template_routes):
                logger.warning("resource template %s is offered twice; the first server serves it", text)
                continue
            template_routes.append(TemplateRoute(text, template_pattern(text), s.server))
            schemes.setdefault(_scheme(text), s.server)
            if s.available:
                templates.append(template)

    names = assign_exposed_names(
        (s.server, s.prefix, str(p.get("name", ""))) for s in servers for p in s.prompts
    )
    prompts: list[dict[str, Any]] = []
    prompt_routes: dict[str, PromptRoute] = {}
    for s in servers:
        for prompt in s.prompts:
            name = str(prompt.get("name", ""))
            exposed = names[(s.server, name)]
            prompt_routes[exposed] = PromptRoute(s.server, name)
            if s.available:
                prompts.append({**prompt, "name": exposed})

    return Offerings(
        resources=tuple(resources),
        resource_templates=tuple(templates),
        prompts=tuple(prompts),
        resource_owners=MappingProxyType(owners),
        template_routes=tuple(template_routes),
        prompt_routes=MappingProxyType(prompt_routes),
        scheme_owners=MappingProxyType(schemes),
    )


_EXPRESSION = re.compile(r"\{([+#./;?&]?)([^}]*)\}")
# What each RFC 6570 operator's expansion can look like, loosely: enough to tell servers apart.
_OPERATOR_PATTERNS = {
    "": r"[^/?#]*",
    "+": r".*",
    "#": r"(?:#.*)?",
    ".": r"(?:\.[^/?#]*)*",
    "/": r"(?:/[^/?#]*)*",
    ";": r"(?:;[^/?#]*)*",
    "?": r"(?:\?[^#]*)?",
    "&": r"(?:&[^#]*)?",
}


def template_pattern(template: str) -> re.Pattern[str]:
    """A regular expression matching the URIs an RFC 6570 template can expand to."""
    parts: list[str] = []
    position = 0
    for match in _EXPRESSION.finditer(template):
        parts.append(re.escape(template[position : match.start()]))
        parts.append(_OPERATOR_PATTERNS[match.group(1)])
        position = match.end()
    parts.append(re.escape(template[position:]))
    return re.compile("".join(parts))


def _scheme(uri: str) -> str:
    head, sep, _ = uri.partition(":")
    return head.lower() if sep else ""
