"""``python -m solo_hyper``: the command line (solo_hyper.cli.main)."""

import sys

from solo_hyper.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
