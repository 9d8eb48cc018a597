"""OpenAPI sources: a REST API described by an OpenAPI 3.0 or 3.1 document, its operations served
as tools. `spec.py` loads a document (every file it refers to included), `operations.py` turns
its operations into tools; neither sends a request to the API itself.
"""
