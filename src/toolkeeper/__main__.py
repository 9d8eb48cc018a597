"""`python -m toolkeeper` and the `toolkeeper` command."""

import gc


def run() -> None:
    # Start-up allocates a few hundred thousand objects that live as long as the process, and
    # collecting while they are imported costs a tenth of start-up. `serve` turns the collector
    # back on once the gateway is up (freezing what start-up made, so that later collections
    # skip it); every other command turns it on before it runs.
    gc.disable()
    from toolkeeper.cli.app import main

    main()


if __name__ == "__main__":
    run()
