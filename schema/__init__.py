"""SurrealQL schema files, applied in name order at start-up (shipped as memoryd.schema)."""
