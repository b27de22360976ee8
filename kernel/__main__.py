import sys

from kernel.cli import main

sys.exit(main())
