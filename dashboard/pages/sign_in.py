"""Sign in with a team API key (validated with GET /me), kept in the session cookie.

Ids: sign-in-key (input), sign-in-submit (button), sign-in-message.
"""

from __future__ import annotations

import dash
from dash import Input, Output, State, dcc, html, no_update

from dashboard.api import session
from dashboard.api.client import ApiError
from dashboard.api.session import safe_next
from dashboard.views.components import alert, href

dash.register_page(__name__, path="/sign-in", name="Sign in", title="Sign in · RLVR Explorer")


# Why a session ended (dashboard.api.session.end_session), said above the form.
ENDED = {
    "refused": "Your session has ended: the API no longer accepts its key (revoked or unknown). "
    "Sign in with a valid key.",
    "revoked": "You revoked the API key this session was signed in with, so the session has ended. "
    "Sign in with another key.",
}


def layout(next: str | None = None, ended: str | None = None, **_):
    team = session.team_name()
    return html.Div(
        className="page narrow section",
        children=[
            html.H2("Sign in"),
            html.P(
                "Paste your team's API key. It stays in this browser's session cookie; the dashboard "
                "sends it to the API with every request.",
                className="help",
            ),
            html.P(f"Currently signed in as {team}.", className="muted") if team else None,
            alert(ENDED[ended], "info", id="sign-in-ended") if ended in ENDED else None,
            dcc.Store(id="sign-in-next", data=safe_next(next)),
            dcc.Input(
                id="sign-in-key",
                type="password",
                placeholder="API key",
                className="input wide",
                n_submit=0,
                autoComplete="off",
            ),
            html.Div(
                html.Button("Sign in", id="sign-in-submit", n_clicks=0, className="button"), style={"marginTop": "12px"}
            ),
            html.Div(id="sign-in-message"),
            dcc.Location(id="sign-in-redirect", refresh=True),
        ],
    )


@dash.callback(
    Output("sign-in-message", "children"),
    Output("sign-in-redirect", "href"),
    Input("sign-in-submit", "n_clicks"),
    Input("sign-in-key", "n_submit"),
    State("sign-in-key", "value"),
    State("sign-in-next", "data"),
    prevent_initial_call=True,
)
def submit(_clicks, _submits, key, target):
    key = (key or "").strip()
    if not key:
        return alert("Enter an API key."), no_update
    try:
        me = session.client_for(key).me()
    except ApiError as exc:
        msg = "This API key is not valid." if exc.unauthorized else f"Could not sign in: {exc.message}"
        return alert(msg), no_update
    session.sign_in(key, me.get("team") or {})
    return alert(f"Signed in as {session.team_name()}.", "ok"), href(safe_next(target))
