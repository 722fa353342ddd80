"""What goes on disk and is read back: shards and their integrity, the combined tables and their schemas, manifests,
the folder lock, and `--where` over a table."""
