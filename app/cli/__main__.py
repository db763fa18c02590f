"""`python3 -m app.cli`: the `duplexcadence` command from a checkout."""
import sys

from .commands import main

sys.exit(main())
