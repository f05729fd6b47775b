import sys

from demo.story import main

sys.exit(main())
