"""The team: its storage against its quota, and its API keys — make one (shown once),
revoke one (refused everywhere within seconds; its dashboard sessions end).

Ids: team-storage (the usage line and bar), team-keys (a table with one
<tr data-key-id data-active> per key, "Revoke" buttons {"type": "key-revoke", "index": id}
on active keys), key-name, key-create, key-new (the new key, shown once), key-message,
team-refresh (a store bumped after each change). Revoking the key this session is signed
in with asks first (key-revoke-confirm, the key in key-revoke-pending), then ends the
session: the browser goes to the sign-in page, which says why.
"""

from __future__ import annotations

import dash
from dash import ALL, Input, Output, State, dcc, html, no_update

from dashboard.api import session
from dashboard.api.client import ApiError
from dashboard.views.components import alert, clicked_index, data_attrs, progress, section, sign_in_required, signed_in
from dashboard.views.formatting import human_bytes, human_time

dash.register_page(__name__, path="/team", name="Team", title="Team · RLVR Explorer", nav="top", order=8)

REVOKE = "key-revoke"


def layout(**_):
    if not signed_in():
        return sign_in_required("/team")
    try:
        api = session.api()
        usage, keys = api.storage(), api.keys()
    except ApiError as exc:
        # a revoked key: the session has just ended (dashboard.api.session.api)
        return sign_in_required("/team") if exc.unauthorized else alert(f"Team unavailable: {exc.message}")
    return html.Div(
        [
            html.H2(f"Team {session.team_name() or ''}".strip()),
            dcc.Store(id="team-refresh", data=0),
            dcc.Store(id="key-revoke-pending"),
            dcc.ConfirmDialog(id="key-revoke-confirm"),
            section(
                "Storage",
                html.Div(storage_view(usage), id="team-storage"),
                help_text="Storage used: the team's traces, each counted as uploaded or, once ingested, as what it "
                "expanded to (archives, .gz) when that is more. Uploads past the quota are refused before they are "
                "stored; deleting traces frees it.",
            ),
            section(
                "API keys",
                html.Div(keys_view(keys), id="team-keys"),
                html.Div(
                    [
                        dcc.Input(id="key-name", placeholder="what the key is for", maxLength=100, className="input"),
                        html.Button("Make a key", id="key-create", n_clicks=0, className="button"),
                    ],
                    className="controls",
                ),
                html.Div(id="key-new"),
                html.Div(id="key-message"),
                help_text="A key is shown once, when it is made; the API stores only its hash. A revoked key is "
                "refused by every server process within a few seconds, and dashboard sessions signed in with it end.",
            ),
        ],
        className="page",
    )


def storage_view(usage: dict):
    used, quota = usage.get("used_bytes") or 0, usage.get("quota_bytes")
    line = f"{human_bytes(used)} used by {usage.get('traces', 0)} trace(s)"
    if not quota:
        return html.P(line + "; no quota.")
    return html.Div(
        [html.P(f"{line} of a {human_bytes(quota)} quota."), progress(used / quota, f"{100 * used / quota:.0f}%")]
    )


def keys_view(keys: list[dict]):
    head = html.Tr([html.Th(h) for h in ("Name", "Key", "Made", "Last used", "State", "")])
    return html.Table([html.Thead(head), html.Tbody([_key_row(k) for k in keys])], className="table")


def _key_row(k: dict) -> html.Tr:
    active = bool(k.get("active"))
    state = (
        "active" + (" (this session)" if k.get("current") else "")
        if active
        else "revoked " + human_time(k.get("revoked_at"))
    )
    action = (
        html.Button("Revoke", id={"type": REVOKE, "index": k["id"]}, n_clicks=0, className="button small danger")
        if active
        else None
    )
    return html.Tr(
        [
            html.Td(k.get("name")),
            html.Td(html.Code((k.get("prefix") or "?") + "…")),
            html.Td(human_time(k.get("created_at"))),
            html.Td(human_time(k.get("last_used_at")) if k.get("last_used_at") else "never"),
            html.Td(state),
            html.Td(action),
        ],
        **data_attrs(key_id=str(k["id"]), active="true" if active else "false"),
    )


@dash.callback(
    Output("key-new", "children"),
    Output("key-message", "children", allow_duplicate=True),
    Output("team-refresh", "data", allow_duplicate=True),
    Input("key-create", "n_clicks"),
    State("key-name", "value"),
    State("team-refresh", "data"),
    prevent_initial_call=True,
)
def create_key(n_clicks, name, refresh):
    name = (name or "").strip()
    if not n_clicks:
        return no_update, no_update, no_update
    if not name:
        return None, alert("Name the key (what it is for)."), no_update
    try:
        made = session.api().create_key(name)
    except ApiError as exc:
        return None, alert(exc.message), no_update
    shown = html.Div(
        [
            html.P(f"Key {made['name']!r}: copy it now, it is not shown again."),
            html.Pre(made["key"], id="key-new-value", className="params"),
        ],
        className="alert alert-ok",
    )
    return shown, None, (refresh or 0) + 1


@dash.callback(
    Output("key-message", "children", allow_duplicate=True),
    Output("team-refresh", "data", allow_duplicate=True),
    Output("key-revoke-confirm", "displayed"),
    Output("key-revoke-confirm", "message"),
    Output("key-revoke-pending", "data"),
    Input({"type": REVOKE, "index": ALL}, "n_clicks"),
    State("team-refresh", "data"),
    prevent_initial_call=True,
)
def revoke_key(_clicks, refresh):
    """Revoke the key clicked; the session's own key only once confirmed."""
    key_id = clicked_index()
    if key_id is None:
        return no_update, no_update, no_update, no_update, no_update
    try:
        api = session.api()
        own = next((k for k in api.keys() if k["id"] == key_id and k.get("current")), None)
        if own is not None:
            ask = (
                f"Key {own.get('name')!r} is the key of this session (you are signed in with it). "
                "Revoking it signs you out of the dashboard. Revoke it?"
            )
            return None, no_update, True, ask, key_id
        api.revoke_key(key_id)
    except ApiError as exc:
        return alert(exc.message), no_update, no_update, no_update, no_update
    return alert(f"Key {key_id} revoked.", "ok"), (refresh or 0) + 1, no_update, no_update, None


@dash.callback(
    Output("key-message", "children", allow_duplicate=True),
    Input("key-revoke-confirm", "submit_n_clicks"),
    State("key-revoke-pending", "data"),
    prevent_initial_call=True,
)
def revoke_own_key(confirmed, key_id):
    """Confirmed: revoke the session's own key, then to the sign-in page."""
    if not confirmed or key_id is None:
        return no_update
    try:
        session.api().revoke_key(key_id)
    except ApiError as exc:
        return alert(exc.message)
    session.end_session("revoked")
    return alert(f"Key {key_id} revoked: signing out.", "ok")


@dash.callback(
    Output("team-keys", "children"),
    Output("team-storage", "children"),
    Input("team-refresh", "data"),
    prevent_initial_call=True,
)
def refresh_views(_refresh):
    try:
        api = session.api()
        return keys_view(api.keys()), storage_view(api.storage())
    except ApiError as exc:
        return alert(exc.message), no_update
