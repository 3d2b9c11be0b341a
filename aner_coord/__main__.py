"""`python -m aner_coord` is the `aner` command."""

import sys

from aner_coord.cli import main

sys.exit(main())
