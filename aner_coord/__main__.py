"""`python -m aner_coord` is the `aner` command."""

import sys

from aner_coord.program import main

sys.exit(main())
