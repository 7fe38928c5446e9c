import sys

from gpu_portal_sdk.cli import main

sys.exit(main())
