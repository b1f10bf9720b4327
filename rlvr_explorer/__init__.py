"""RLVR Explorer's composition root: the command line and the single-machine server that
wire the API, the dashboard and a worker together. Nothing else imports the dashboard."""


def __getattr__(name: str):
    # `from rlvr_explorer import Client` without importing the CLI or the server
    if name in ("Client", "ClientError"):
        from rlvr_explorer import client

        return getattr(client, name)
    raise AttributeError(name)
