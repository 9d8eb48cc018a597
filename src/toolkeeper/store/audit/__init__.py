"""The audit log and its chain: every `tools/call` recorded, each record with a MAC over its
content and the previous entry's, keyed with a secret kept outside the store, so a change, a
removal, an insertion or a reordering shows when the chain is walked.

The table's rows and reading them (`log.py`); the chain's key and its custody (`key.py`); a
record's content and MAC (`record.py`); appending under the head's lock (`append.py`); the walk
(`verify.py`); a person's repair, which starts a new segment (`segments.py`); retention
(`retention.py`); exports (`export.py`); the journal of calls not yet in the store (`journal.py`);
and the writer, a thread of its own that writes the records off the event loop (`writer.py`).
"""
