"""`python -m rlhf_trainer run --config FILE`: the RayJob entrypoint on a cluster."""

import sys

from rlhf_trainer.cli import main

if __name__ == "__main__":
    sys.exit(main())
