"""File watching: the watcher turns file-system events into queued jobs; it never parses."""
