"""RLVR Explorer's composition root: the command line and the single-machine server that
wire the API, the dashboard and a worker together. Nothing else imports the dashboard."""
