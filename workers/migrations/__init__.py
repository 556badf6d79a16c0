"""The data steps of memoryd/database/migrate.py that run a worker's stage again over stored
rows."""
