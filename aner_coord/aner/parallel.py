"""`aner.parallel` is `aner_coord.parallel`, the very module, not a copy: importing this file
puts that module in its place, so that both names give the same functions, types and state."""

import sys
from typing import TYPE_CHECKING

from aner_coord import parallel

if TYPE_CHECKING:  # what a type checker sees of `aner.parallel`
    from aner_coord.parallel import *  # noqa: F403

sys.modules[__name__] = parallel
