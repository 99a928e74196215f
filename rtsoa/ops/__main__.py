"""`python -m rtsoa.ops [--all] [--jobs N]`: compile every op's entry ahead of time
(`rtsoa.ops.library.main`; `rtsoa compile` also takes models)."""

import sys

from rtsoa.ops.library import main

sys.exit(main())
