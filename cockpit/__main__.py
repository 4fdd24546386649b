"""`python -m cockpit`: the same command as the ``cockpit`` script."""

import sys

from cockpit.entry import main

sys.exit(main())
