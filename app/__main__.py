"""`python -m app`: the `duplexcadence` command (the installers' frozen entry point too)."""
import sys

from app.cli.commands import main

if __name__ == "__main__":
    sys.exit(main())
