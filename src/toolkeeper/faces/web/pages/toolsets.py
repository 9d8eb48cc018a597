"""The toolsets pages: the list (with import), building one by picking tools, and one toolset
with its actions (equip, unequip, repin, export, delete).

Every change goes through `services.toolsets` as a person's (`by_person`). Forms that change
a toolset carry the version it was shown at, so a change made meanwhile is reported, not
overwritten. Each works without scripts: the picker's search and "select all shown" are
buttons of its one form, which keeps the selection across them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

from starlette.datastructures import FormData, UploadFile
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from toolkeeper.catalog import Catalog
from toolkeeper.errors import ErrorKind, NextStep, ServiceError, http_status
from toolkeeper.faces.web.api_toolsets import download_headers
from toolkeeper.faces.web.face import JsonResponse, face_of, render
from toolkeeper.services.toolsets import check_description, status_counts
from toolkeeper.toolsets.model import check_toolset_name

# What a redirect after a change says on the page it lands on (a code, never the text itself,
# so a link cannot make the page say anything else).
DONE = {
    "built": "Toolset saved.",
    "edited": "Changes saved.",
    "equipped": "Equipped: clients are offered its tools now.",
    "unequipped": "Unequipped: clients are offered every tool again.",
    "repinned": "Changed tools accepted.",
    "imported": "Toolset imported.",
    "deleted": "Toolset deleted.",
}


def toolset_url(name: str, done: str | None = None) -> str:
    return f"/toolsets/{quote(name, safe='')}" + (f"?done={done}" if done else "")


def redirect(url: str) -> Response:
    return RedirectResponse(url, status_code=303)


def local_path(value: Any, fallback: str) -> str:
    """A page of this dashboard to go back to; anything else becomes `fallback`."""
    text = value if isinstance(value, str) else ""
    return text if text.startswith("/") and not text.startswith("//") else fallback


# -- the list and import ------------------------------------------------------------------------


@dataclass
class ImportForm:
    """The import form as sent, kept to show again beside its error."""

    document: str = ""
    name: str = ""
    overwrite: bool = False
    error: str | None = None


async def toolsets_list(request: Request, imported: ImportForm | None = None, status: int = 200) -> Response:
    saved = await face_of(request).services.toolsets.saved()
    for info in saved["toolsets"]:
        info["counts"] = status_counts(info)
    return render(
        request,
        "toolsets.html",
        {
            "toolsets": saved["toolsets"],
            "costs": saved.get("costs"),
            "done": DONE.get(request.query_params.get("done", "")),
            "import_form": imported or ImportForm(),
        },
        status,
    )


async def import_toolset(request: Request) -> Response:
    async with request.form() as form:
        sent = ImportForm(
            document=str(form.get("document") or ""),
            name=str(form.get("name") or "").strip(),
            overwrite=form.get("overwrite") == "yes",
        )
        upload = form.get("file")
        if isinstance(upload, UploadFile) and upload.filename:
            sent.document = (await upload.read()).decode("utf-8", errors="replace")
    if not sent.document.strip():
        sent.error = "Paste an exported toolset, or choose its file."
        return await toolsets_list(request, sent, 422)
    try:
        document = json.loads(sent.document)
    except json.JSONDecodeError as exc:
        sent.error = f"Not valid JSON (line {exc.lineno}, column {exc.colno}): {exc.msg}."
        return await toolsets_list(request, sent, 422)
    try:
        result = await face_of(request).services.toolsets.import_toolset(
            document, sent.name or None, sent.overwrite, by_person=True
        )
    except ServiceError as exc:
        sent.error = str(exc)
        if exc.next_step is NextStep.OVERWRITE:
            sent.error += ' Tick "Replace a toolset of the same name" to replace it.'
        return await toolsets_list(request, sent, http_status(exc.kind))
    return redirect(toolset_url(result["toolsetName"], "imported"))


# -- building by picking tools ------------------------------------------------------------------


@dataclass
class Picker:
    """The build form: what was typed, what is picked, and what went wrong where."""

    name: str = ""
    description: str = ""
    equip: bool = False
    query: str = ""
    picked: set[str] = field(default_factory=set)
    errors: dict[str, str] = field(default_factory=dict)
    # Editing a saved toolset: its name, and the version the form was first shown at.
    editing: str | None = None
    version: str = ""

    @classmethod
    def from_form(cls, form: FormData, editing: str | None = None) -> Picker:
        return cls(
            name=editing or str(form.get("name") or "").strip(),
            description=str(form.get("description") or ""),
            equip=form.get("equip") == "yes",
            query=str(form.get("q") or ""),
            picked={str(v) for v in form.getlist("tool")},
            editing=editing,
            version=str(form.get("version") or ""),
        )


async def show_picker(request: Request, picker: Picker, status: int = 200) -> Response:
    toolsets = face_of(request).services.toolsets
    shown = await toolsets.available_tools(picker.query)
    shown_names = {t["namespacedName"] for s in shown["toolsByServer"] for t in s["tools"]}
    # What each tool adds to this toolset: the page sums the ticked ones as they are ticked.
    try:
        picking = await toolsets.picking_costs(picker.editing)
    except ServiceError:  # the toolset being edited is gone: saving says so
        picking = None
    tool_tokens: dict[str, int] = picking["tools"] if picking else {}
    return render(
        request,
        "toolsets_new.html",
        {
            "form": picker,
            "servers": shown["toolsByServer"],
            "total": shown["summary"]["totalTools"],
            "shown_count": len(shown_names),
            # Picked tools the search hides stay picked: the form carries them as hidden fields.
            "picked_hidden": sorted(picker.picked - shown_names),
            "tool_tokens": tool_tokens,
            "picked_tokens": sum(tool_tokens.get(name, 0) for name in picker.picked),
            "costs": picking["costs"] if picking else None,
        },
        status,
    )


async def new_toolset(request: Request) -> Response:
    return await show_picker(request, Picker(query=request.query_params.get("q", "")))


async def edit_toolset(request: Request) -> Response:
    name = request.path_params["name"]
    info = await face_of(request).services.toolsets.show(name, with_version=True)
    picker = Picker(
        name=name,
        description=info["description"],
        query=request.query_params.get("q", ""),
        picked={t["namespacedName"] for t in info["tools"] if t.get("namespacedName")},
        editing=name,
        version=info["version"],
    )
    return await show_picker(request, picker)


async def picker_action(request: Request) -> Response:
    """One of the build (or edit) form's buttons: search, select or clear what is shown, or save."""
    editing = request.path_params.get("name")
    async with request.form() as form:
        picker = Picker.from_form(form, editing)
        action = str(form.get("action") or "save")
        shown_query = str(form.get("shown_q") or "")
    toolsets = face_of(request).services.toolsets
    if action in ("select-shown", "clear-shown"):
        shown = await toolsets.available_tools(shown_query)
        names = {t["namespacedName"] for s in shown["toolsByServer"] for t in s["tools"]}
        picker.picked = picker.picked | names if action == "select-shown" else picker.picked - names
        picker.query = shown_query
    if action != "save":
        return await show_picker(request, picker)
    if editing is not None:
        return await save_edited(request, picker, editing)
    return await save_picked(request, picker)


def in_order(picked: set[str], catalog: Catalog, first: list[str] | None = None) -> list[str]:
    """The picked tools as the toolset lists them: those in `first` (a toolset's own order) in
    that order, then the others as the catalog lists them, then any the catalog does not know
    (gone meanwhile: the service names them in its refusal)."""
    ordered = [name for name in first or [] if name in picked]
    ordered += [t.namespaced_name for t in catalog.tools if t.namespaced_name in picked - set(ordered)]
    return ordered + sorted(picked - set(ordered))


async def save_picked(request: Request, picker: Picker) -> Response:
    toolsets = face_of(request).services.toolsets
    # The service checks all of this again; asked first here, so each message sits by its field.
    for where, check, value in (
        ("name", check_toolset_name, picker.name),
        ("description", check_description, picker.description),
    ):
        try:
            check(value)
        except ServiceError as exc:
            picker.errors[where] = str(exc)
    if not picker.picked:
        picker.errors["tools"] = "Pick at least one tool."
    if picker.errors:
        return await show_picker(request, picker, 422)
    ordered = in_order(picker.picked, toolsets.live_catalog())
    try:
        await toolsets.build(picker.name, ordered, picker.description, picker.equip, by_person=True)
    except ServiceError as exc:
        picker.errors["name" if exc.kind is ErrorKind.CONFLICT else "tools"] = str(exc)
        return await show_picker(request, picker, http_status(exc.kind))
    return redirect(toolset_url(picker.name, "built"))


async def save_edited(request: Request, picker: Picker, name: str) -> Response:
    try:
        check_description(picker.description)
    except ServiceError as exc:
        picker.errors["description"] = str(exc)
    if not picker.picked:
        picker.errors["tools"] = "Pick at least one tool (or delete the toolset)."
    if picker.errors:
        return await show_picker(request, picker, 422)
    toolsets = face_of(request).services.toolsets
    current = await toolsets.show(name)
    stored_order = [t["namespacedName"] for t in current["tools"] if t.get("namespacedName")]
    try:
        await toolsets.replace(
            name,
            in_order(picker.picked, toolsets.live_catalog(), stored_order),
            picker.description,
            by_person=True,
            expected_version=picker.version or None,
        )
    except ServiceError as exc:
        picker.errors["stale" if exc.kind is ErrorKind.CONFLICT else "tools"] = str(exc)
        return await show_picker(request, picker, http_status(exc.kind))
    return redirect(toolset_url(name, "edited"))


# -- one toolset --------------------------------------------------------------------------------


async def show_toolset(
    request: Request, name: str | None = None, *, stale: str | None = None, status: int = 200
) -> Response:
    info = await face_of(request).services.toolsets.show(
        name or request.path_params["name"], with_version=True
    )
    return render(
        request,
        "toolsets_show.html",
        {
            "t": info,
            "counts": status_counts(info),
            "done": DONE.get(request.query_params.get("done", "")),
            "stale": stale,
        },
        status,
    )


async def equip(request: Request) -> Response:
    name = request.path_params["name"]
    async with request.form() as form:
        back = local_path(form.get("back"), toolset_url(name))
    await face_of(request).services.toolsets.equip(name)
    return redirect(with_done(back, "equipped"))


async def unequip(request: Request) -> Response:
    async with request.form() as form:
        back = local_path(form.get("back"), "/toolsets")
    await face_of(request).services.toolsets.unequip()
    return redirect(with_done(back, "unequipped"))


def with_done(path: str, done: str) -> str:
    base = path.split("?", 1)[0]
    return f"{base}?{urlencode({'done': done})}"


async def repin(request: Request) -> Response:
    name = request.path_params["name"]
    async with request.form() as form:
        version = str(form.get("version") or "") or None
    try:
        await face_of(request).services.toolsets.repin(name, expected_version=version)
    except ServiceError as exc:
        if exc.kind is not ErrorKind.CONFLICT:
            raise
        return await show_toolset(request, name, stale=str(exc), status=409)
    return redirect(toolset_url(name, "repinned"))


async def delete(request: Request) -> Response:
    """Asked without confirming, the service says what deleting does: that is the confirm page.
    Confirmed, the toolset goes, unless it changed since the person looked at it."""
    name = request.path_params["name"]
    async with request.form() as form:
        version = str(form.get("version") or "") or None
        confirmed = form.get("confirm") == "yes"
    toolsets = face_of(request).services.toolsets
    try:
        await toolsets.delete(name, confirm=confirmed, by_person=True, expected_version=version)
    except ServiceError as exc:
        if exc.kind is ErrorKind.CONFLICT:
            return await show_toolset(request, name, stale=str(exc), status=409)
        if exc.next_step is not NextStep.CONFIRM:
            raise
        info = await toolsets.show(name)
        return render(
            request, "toolsets_delete.html", {"t": info, "question": str(exc), "version": version or ""}
        )
    return redirect("/toolsets?done=deleted")


async def export(request: Request) -> Response:
    document = await face_of(request).services.toolsets.export(request.path_params["name"])
    return JsonResponse(document, headers=download_headers(document["name"]))


ROUTES: list[BaseRoute] = [
    Route("/toolsets", toolsets_list, methods=["GET"], name="toolsets"),
    Route("/toolsets/new", new_toolset, methods=["GET"], name="toolset_new"),
    Route("/toolsets/new", picker_action, methods=["POST"]),
    Route("/toolsets/import", import_toolset, methods=["POST"]),
    Route("/toolsets/unequip", unequip, methods=["POST"]),
    Route("/toolsets/{name}", show_toolset, methods=["GET"], name="toolset"),
    Route("/toolsets/{name}/edit", edit_toolset, methods=["GET"]),
    Route("/toolsets/{name}/edit", picker_action, methods=["POST"]),
    Route("/toolsets/{name}/equip", equip, methods=["POST"]),
    Route("/toolsets/{name}/repin", repin, methods=["POST"]),
    Route("/toolsets/{name}/delete", delete, methods=["POST"]),
    Route("/toolsets/{name}/export", export, methods=["GET"]),
]
