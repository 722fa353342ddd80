"""plan -> shards: the executors (local, processes, slurm; registered in `executors.py`), the worker they start, and the
engine that runs a plan with its executor and combines the shards into tables.

Nothing is imported here: the fork server imports `execution.fork_server_guard` before torch."""
