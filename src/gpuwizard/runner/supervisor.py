"""Former path of gpuwizard.runner.supervise.supervisor (0.1): kept one release for what an older gpuwizard started."""

import sys

from gpuwizard.runner.supervise.supervisor import main

if __name__ == "__main__":
    sys.exit(main())
