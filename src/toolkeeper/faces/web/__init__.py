"""The web face: the dashboard's pages and the JSON API under `/api/`, over the same services as
the CLI and the configuration tools. Pages and API parse input, call a service and format its
answer; every rule lives in the services. `app.build_web_app` assembles it; the edge serves it
beside `/mcp` or alone (`toolkeeper ui`)."""
