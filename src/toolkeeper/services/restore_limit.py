"""The largest backup a restore reads unless the person raises the limit. A module of its own: the
`restore` command shows it in its help, which loads no store."""

# A restore holds every row of the backup in memory at once, about four times the file's size
# (a 485 MB file took 2.1 GB): a larger file is refused unless the person raises the limit.
MAX_RESTORE_BYTES = 128 * 1024 * 1024
