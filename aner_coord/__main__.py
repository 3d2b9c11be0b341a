"""`python -m aner_coord` is the `aner` command."""

import sys

from aner_coord.cli.main import main

sys.exit(main())
