"""The API's reads and writes of the store, one module per resource: keyword-only
functions `f(session, *, team_id, ...)` that the routes (and the CLI, where it asks the
same) call. Every query is scoped to the team: rows of a trace's tables carry only the
trace id, so their queries add `scope.owned_trace` (the trace is the team's)."""
