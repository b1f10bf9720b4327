"""The signed-in team, kept in Flask's session cookie, and an API client for it.

The cookie is HTTP-only, SameSite=Lax, `Secure` when the page is served over HTTPS (the
request's scheme or a proxy's X-Forwarded-Proto), lives 12 hours, and is signed with
the server's secret (`Settings.secret_key` / RLVR_SECRET_KEY, else the one persisted in
the data folder: see `backend.settings.Settings.session_secret`).

It never carries the raw API key: the key is sealed (encrypted and authenticated) with
keys derived from the secret — a random 16-byte nonce, an HMAC-SHA256 keystream (CTR
construction) XORed with the key, and an HMAC-SHA256 tag over nonce and ciphertext —
so a copied or logged cookie does not reveal the key, and only a server holding the
secret can map the cookie back to it. Rotating the secret signs everybody out.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from urllib.parse import quote, unquote, urlsplit

import flask
from flask.sessions import SecureCookieSessionInterface

from dashboard.api.client import ApiClient

SESSION_ENDED = "session-ended"  # a store of the app's layout: a sign-in URL set there is opened
API_BASE_URL = "RLVR_API_BASE_URL"
API_HTTP_CLIENT = "RLVR_API_HTTP_CLIENT"
KEY_FIELD = "key_token"  # the sealed API key in the session
_NONCE, _TAG = 16, 16


def _derived(purpose: bytes, app: flask.Flask | None = None) -> bytes:
    secret = (app or flask.current_app).secret_key
    if not secret:
        raise RuntimeError("the dashboard has no secret key")
    raw = secret.encode() if isinstance(secret, str) else bytes(secret)
    return hmac.new(hashlib.sha256(raw).digest(), b"rlvr-session/" + purpose, hashlib.sha256).digest()


def _keystream(nonce: bytes, n: int, app: flask.Flask | None = None) -> bytes:
    enc = _derived(b"api-key-encryption", app)
    blocks = (n + 31) // 32
    return b"".join(hmac.new(enc, nonce + i.to_bytes(4, "big"), hashlib.sha256).digest() for i in range(blocks))[:n]


def seal_key(key: str, app: flask.Flask | None = None) -> str:
    """The API key as an opaque token for the cookie (needs the app's secret to open;
    `app`: the Flask app, default the current one)."""
    nonce = secrets.token_bytes(_NONCE)
    data = key.encode()
    ct = bytes(a ^ b for a, b in zip(data, _keystream(nonce, len(data), app), strict=True))
    tag = hmac.new(_derived(b"api-key-mac", app), nonce + ct, hashlib.sha256).digest()[:_TAG]
    return base64.urlsafe_b64encode(nonce + ct + tag).decode()


def open_key(token: object) -> str | None:
    """The API key of a sealed token, or None (tampered, another secret, not a token)."""
    if not isinstance(token, str):
        return None
    try:
        raw = base64.urlsafe_b64decode(token.encode())
    except ValueError:
        return None
    if len(raw) <= _NONCE + _TAG:
        return None
    nonce, ct, tag = raw[:_NONCE], raw[_NONCE:-_TAG], raw[-_TAG:]
    expected = hmac.new(_derived(b"api-key-mac"), nonce + ct, hashlib.sha256).digest()[:_TAG]
    if not hmac.compare_digest(tag, expected):
        return None
    try:
        return bytes(a ^ b for a, b in zip(ct, _keystream(nonce, len(ct)), strict=True)).decode()
    except UnicodeDecodeError:
        return None


class SessionInterface(SecureCookieSessionInterface):
    """Flask's signed cookie, marked Secure whenever the request came over HTTPS."""

    def get_cookie_secure(self, app: flask.Flask) -> bool:
        if super().get_cookie_secure(app):
            return True
        if not flask.has_request_context():
            return False
        request = flask.request
        proto = request.headers.get("X-Forwarded-Proto", "").split(",")[0].strip().lower()
        return request.is_secure or proto == "https"


def safe_next(target: str | None) -> str:
    """Only same-origin relative paths may follow a sign-in: "/" then not "/" or "\\"
    (browsers read "/\\host" and "//host" as another host), no backslash or control
    character anywhere (browsers drop tabs and newlines and turn "\\" into "/"), also
    once percent-decoded ("/%5Chost"), and no scheme or host when parsed."""
    fallback = "/traces"
    if not isinstance(target, str) or not target:
        return fallback
    for text in (target, unquote(target)):
        if not text.startswith("/") or text[1:2] in ("/", "\\"):
            return fallback
        if "\\" in text or any(ord(c) < 0x20 or ord(c) == 0x7F for c in text):
            return fallback
        parts = urlsplit(text)
        if parts.scheme or parts.netloc:
            return fallback
    return target


def api_key() -> str | None:
    return open_key(flask.session.get(KEY_FIELD))


def team_name() -> str | None:
    return flask.session.get("team_name") if api_key() else None


def sign_in(key: str, team: dict) -> None:
    flask.session.clear()
    flask.session[KEY_FIELD] = seal_key(key)
    flask.session["team_name"] = team.get("name") or str(team.get("id", ""))
    flask.session.permanent = True


def sign_out() -> None:
    flask.session.clear()


def end_session(reason: str = "refused") -> None:
    """Sign out and, inside a callback, send the browser to the sign-in page, which says
    why (`reason`: "refused", the API refused the key; "revoked", the user revoked it)
    and comes back to the page the user was on."""
    import dash  # (only here: the rest of this module is plain Flask)

    sign_out()
    target = dash.get_relative_path("/sign-in") + f"?ended={reason}"
    back = _page_of_request()
    if back and not back.startswith("/sign-in"):
        target += "&next=" + quote(back, safe="")
    try:
        dash.set_props(SESSION_ENDED, {"data": target})
    except dash.exceptions.MissingCallbackContextException:
        pass  # not in a callback (a download): the pages' sign-in guard takes over


def _page_of_request() -> str | None:
    """The app-relative page (path and query) a callback request came from."""
    import dash

    if not flask.has_request_context() or not flask.request.referrer:
        return None
    page = urlsplit(flask.request.referrer)
    try:
        path = "/" + dash.strip_relative_path(page.path or "/")
    except dash.exceptions.UnsupportedRelativePath:
        return None
    return path + (f"?{page.query}" if page.query else "")


def client_for(key: str | None) -> ApiClient:
    """An API client for the app serving this request, acting with `key`."""
    cfg = flask.current_app.config
    return ApiClient(cfg[API_BASE_URL], key, http=cfg.get(API_HTTP_CLIENT))


def api() -> ApiClient:
    """An API client acting as the signed-in team (callbacks and layouts only). When the
    API refuses the key (revoked), the session ends: this response clears the cookie and
    sends the browser to the sign-in page (`end_session`)."""
    client = client_for(api_key())
    client.on_unauthorized = end_session
    return client
