"""The pure stages the jobs run: chunking, entities, redaction, the reader, the transcript
parsers, the code graph's extraction."""
