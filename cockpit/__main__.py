"""`python -m cockpit`: the same command as the ``cockpit`` script."""

import sys

from cockpit.faces.entry import main

sys.exit(main())
