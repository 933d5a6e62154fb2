import sys

from harness.pipelines.agent_stub import main

sys.exit(main())
