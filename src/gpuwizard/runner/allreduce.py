"""Former path of gpuwizard.runner.bandwidth.allreduce (0.1): kept one release for what an older gpuwizard started."""

import sys

from gpuwizard.runner.bandwidth.allreduce import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
