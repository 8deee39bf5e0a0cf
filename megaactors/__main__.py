import sys

from megaactors.cli import main

sys.exit(main())
