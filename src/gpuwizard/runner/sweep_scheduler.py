"""Former path of gpuwizard.runner.sweep.scheduler (0.1): kept one release for what an older gpuwizard started."""

import sys

from gpuwizard.runner.sweep.scheduler import main

if __name__ == "__main__":
    sys.exit(main())
