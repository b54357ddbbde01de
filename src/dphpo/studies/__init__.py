"""One layer for vision and language studies: what a workflow job runs, from the config.

- `config`: torch-free: validation (the schema, the one source of defaults, then the cross-checks),
  variant merge, a language study's `overrides` merged over the base config, target ε, run
  settings and their hash, the trainer kind of a study.
- `trainers`: the trainer registry keyed by kind and `build_trainer(config, study, inputs)`.
- `writer`: the provenance block and the result writer (per target ε: result.json, the model,
  the internal log), the same for both halves.
- `jobs`: a job's log and the language jobs (one HPO method on one study and seed).

Nothing is imported here, so that `import dphpo.studies.config` stays free of torch.
"""
