"""What a user writes and gpuwizard reads: presets, settings, the policy catalog, datasets, trainer options and the job
types every layer above shares."""
