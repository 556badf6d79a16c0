"""Entity upserts shared by the code and transcript writes."""

# Entities are merged, not replaced: aliases accumulate (sorted), first_seen and last_seen are
# the earliest and latest sightings, so the result does not depend on the order of writes.
UPSERT_ENTITIES = """
            FOR $e IN $entities {
                UPSERT $e.id SET kind = $e.kind, key = $e.key, name = $e.name,
                    project = $e.project,
                    aliases = array::sort(array::union(aliases ?? [], $e.aliases)),
                    first_seen = time::min([first_seen ?? $e.first_seen, $e.first_seen]),
                    last_seen = time::max([last_seen ?? $e.last_seen, $e.last_seen]);
            };"""
