"""`/`: straight to the traces (or to sign-in)."""

import dash
from dash import dcc

from dashboard.views.components import href, redirect, sign_in_required, signed_in

dash.register_page(__name__, path="/", name="Home", title="RLVR Explorer")


def layout(**_):
    if not signed_in():
        return sign_in_required("/traces")
    return redirect(href("/traces"), dcc.Link("Your traces", href=href("/traces")))
