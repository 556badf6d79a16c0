"""The database as a whole: the migrations, the export and the compaction."""
