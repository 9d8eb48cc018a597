"""Why the gateway refuses to begin serving: the command that starts it reports these, and
knows them without importing the HTTP edge and the dashboard, which a gateway over stdio
never loads."""


class CannotStart(Exception):
    """The gateway would serve tools beyond this machine with no way to tell who calls."""


class CannotServeDashboard(Exception):
    """The dashboard has nothing to show: there is no store."""
