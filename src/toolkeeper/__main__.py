from toolkeeper.cli.app import main

main()
