"""`python -m toolkeeper` and the `toolkeeper` command."""

import gc
import logging
import sys
from pathlib import Path


def run() -> None:
    # Start-up allocates a few hundred thousand objects that live as long as the process, and
    # collecting while they are imported costs a tenth of start-up. `serve` turns the collector
    # back on once the gateway is up (freezing what start-up made, so that later collections
    # skip it); every other command turns it on before it runs.
    gc.disable()
    _start_children_early(sys.argv[1:])
    from toolkeeper.cli.app import main

    main()


def _start_children_early(argv: list[str]) -> None:
    """For `serve`: start the stdio children now, before the CLI and the SDK are imported (about
    a second), so that they boot while the gateway does. Only the plain spellings of --config
    and --demo are read here; `serve` itself reads its options, reports any problem, and starts
    whatever was not started here."""
    if not argv or argv[0] != "serve" or "--help" in argv:
        return
    config_path: Path | None = None
    demo = False
    args = iter(argv[1:])
    for arg in args:
        if arg == "--demo":
            demo = True
        elif arg in ("--config", "-c"):
            config_path = Path(next(args, ""))
        elif arg.startswith("--config="):
            config_path = Path(arg.partition("=")[2])
    from toolkeeper.config import load_config
    from toolkeeper.config.loader import demo_config_path
    from toolkeeper.downstreams.stdio import spawn_early
    from toolkeeper.log import setup_logging

    # Quietly: `serve` reads the configuration again and reports what is wrong with it, once.
    # The standard kinds suffice, and spare importing every kind: only MCP stdio servers are
    # started early.
    logging.disable(logging.CRITICAL)
    try:
        config = load_config(demo_config_path() if demo else config_path)
    except Exception:
        return
    finally:
        logging.disable(logging.NOTSET)
    setup_logging(config.settings.log_level)  # the children's stderr goes to the log from the start
    spawn_early(config)


if __name__ == "__main__":
    run()
