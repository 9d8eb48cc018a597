"""What every page and API route shares: the running face, rendering a page with its layout,
JSON written by the project's codec, and a refusal turned into its HTTP answer."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.templating import Jinja2Templates

from toolkeeper import jsonwire
from toolkeeper.errors import ServiceError, http_status
from toolkeeper.faces.web.access import PERSON, Access
from toolkeeper.faces.web.flash import Flashes
from toolkeeper.runtime.gateway import Gateway
from toolkeeper.services import Services
from toolkeeper.services.signin import SignInService

HERE = Path(__file__).parent
API_PREFIX = "/api"
STATIC_PREFIX = "/static"
# How an approval decided in the browser names its channel.
CHANNEL = "dashboard"


@dataclass(frozen=True)
class WebFace:
    """What every route reads: the running gateway, its services and the access settings, the
    sign-ins begun here and the messages waiting to be shown."""

    gateway: Gateway
    services: Services
    access: Access
    templates: Jinja2Templates
    # One for the face: it knows which sign-ins it began, so the callback can tell them apart.
    sign_in: SignInService
    flashes: Flashes = field(default_factory=Flashes)


def face_of(request: Request) -> WebFace:
    face: WebFace = request.app.state.face
    return face


class JsonResponse(JSONResponse):
    """JSON written by the project's one codec (what the MCP face sends is what the API sends)."""

    def render(self, content: Any) -> bytes:
        return jsonwire.dumps(content)


def is_api(request: Request) -> bool:
    path = request.url.path
    return path == API_PREFIX or path.startswith(API_PREFIX + "/")


def service_refusal(request: Request, error: ServiceError) -> Response:
    """A refusal as its kind's HTTP status: JSON under /api/, the error page elsewhere."""
    status = http_status(error.kind)
    if is_api(request):
        body: dict[str, Any] = {"error": {"kind": error.kind.value, "message": str(error)}}
        if error.next_step is not None:
            body["error"]["nextStep"] = error.next_step.value
        return JsonResponse(body, status_code=status)
    return render(request, "error.html", {"status": status, "message": str(error)}, status_code=status)


def render(
    request: Request, template: str, context: dict[str, Any] | None = None, status_code: int = 200
) -> Response:
    """A page: `template` with `context`, plus what the layout shows on every page (the mode,
    the equipped toolset, waiting approvals), the CSRF token its forms carry and whether its
    visitor must sign in before changing anything."""
    face = face_of(request)
    gateway = face.gateway
    layout = {
        "mode": gateway.mode_name,
        "toolset": gateway.toolset_name,
        "csrf": request.scope.get("state", {}).get("csrf", ""),
        "read_only": request.scope.get("state", {}).get("read_only", False),
        "theme": request.cookies.get("theme", "auto"),
        "path": request.url.path,
    }
    context = {**layout, **(context or {})}
    return face.templates.TemplateResponse(request, template, context, status_code=status_code)


def parse_json(text: str | bytes, what: str) -> Any:
    """JSON a person or program sent, or a 422 that says what is wrong with it."""
    try:
        return jsonwire.loads(text.encode() if isinstance(text, str) else text)
    except ValueError as exc:  # also what is nested too deeply
        raise ServiceError(f"{what} is not valid JSON: {exc}") from None
    except RecursionError:
        raise ServiceError(f"{what} is nested too deeply to be read as JSON.") from None


async def json_object(request: Request, *, required: bool = True) -> dict[str, Any]:
    """The request's body as a JSON object, or a 422; an empty body is an empty object when the
    body is not `required`."""
    body = await request.body()
    if not body.strip() and not required:
        return {}
    data = parse_json(body, "The request body")
    if not isinstance(data, dict):
        raise ServiceError("The request body must be a JSON object.")
    return data


def decided_by(request: Request) -> str:
    """Who answers through this request, as approvals record it (the CLI's answers read "person
    via cli"): the access token's holder, or an admin client key by its name."""
    holder = request.scope.get("state", {}).get("holder") or PERSON
    return f"{holder} via {CHANNEL}"
