"""Workload modelling: fit per-task length models to traces, generate synthetic
PolyTrace-style workloads from them or from PolyTrace's fitted-parameter file, export.

- `fit.fit_workload(samples, turns, tool_calls) -> {task: TaskLengthModel}`
  (`model.report()` lists the KS statistic of every fit)
- `generate.generate_steps(model, n_steps, ...) -> [GeneratedStep]`
- `params_file.load_parameters(json)`, `params_file.generate_from_parameters(...)`
- `export.write_packed_jsonl / write_multiturn_jsonl / write_compact_json`
- `synthetic.packed_length_rows` (a quick built-in long-tailed workload)
- `polytrace_rows.*` (parsed PolyTrace rows -> columns)
"""
