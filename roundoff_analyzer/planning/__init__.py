"""config -> plan: the validated request (config files and options), checkpoints, and the plan a sweep runs, with its
fingerprint and manifest. `planning.config` loads without torch (for `--help`)."""
