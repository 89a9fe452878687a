"""`python -m ray_operator.bench`: run the benchmark (see `ray_operator.bench.cli`)."""

import sys

from ray_operator.bench.cli import main

sys.exit(main())
