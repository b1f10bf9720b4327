"""The real-engine replay: a trace's recorded work acted out on an inference engine (vLLM).

A room of its own beside the simulator: used by the CLI and workers only, never by core/
or backend/. The engine itself (vLLM, torch, transformers) lives in its own virtual
environment (`bash deploy/engine-venv.sh DIR`); each engine instance runs in a child
process of that environment's python (`engine.server`), driven over pipes by
`engine.client`, so one parent drives several engines and needs no vLLM itself.

Modules: models (random-weight models of preset architectures), workload (a trace's steps
as engine requests), server/client (one engine per process, the `EngineDriver` interface),
policies (designs acted out on engines), calibrate (the batch x context sweep and its fit
into the simulator's iteration-time model), replay (measured vs predicted).
"""
