"""``python -m tallyspan``: the ``tallyspan`` command."""

from tallyspan.cli import main

if __name__ == "__main__":
    main()
