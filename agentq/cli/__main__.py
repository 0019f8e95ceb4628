"""`python -m agentq.cli`: the `agentq` command."""

import sys

from agentq.cli import main

sys.exit(main())
