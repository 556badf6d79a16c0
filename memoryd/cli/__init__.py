"""The `memoryd` command: its commands, doctor, the service manager, purge, logs."""
