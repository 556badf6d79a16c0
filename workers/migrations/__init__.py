"""The data steps of memoryd/migrate.py that run a worker's stage again over stored rows."""
