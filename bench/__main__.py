"""`python -m bench [NAME ...] [--quick] [--json FILE]`, from the repository root."""

import sys

from bench.runner import main

sys.exit(main())
