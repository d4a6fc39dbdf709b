"""SQLite backends of the storage seams (one database file, WAL mode)."""
