"""OpenAPI sources: a REST API described by an OpenAPI 3.0 or 3.1 document, its operations served
as tools. `spec.py` loads a document (every file it refers to included, through `documents.py`,
`parsing.py`, `loaded.py` and `checks.py`), `operations.py` turns its operations into tools (with
`schemas.py` and `bodies.py`), `source.py` serves them and `requests.py` makes each call an HTTP
request.
"""
