import sys

from adaptive_eval.cli import main

sys.exit(main())
