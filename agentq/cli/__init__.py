"""The `agentq` command line (docs/protocol.md#the-job-record). Errors are one clear line on stderr and a non-zero exit.

Settings are read once (`load_settings()`, from the environment) in `main` and handed to each command, which gets its
parts from the composition root through `agentq.Client` or `agentq.runtime`. The rooms:

- `parser`: every command, its arguments and the handler it runs;
- `jobs`: run, submit, status, result, events, cancel; `demo`: the example jobs in embedded mode;
- `calls`: a job's calls and the approval decisions; `fleet`: the known tools and activities;
- `diff`: two jobs side by side (docs/compare.md); `resume`: a failed or canceled job where it stopped (docs/resume.md);
- `serve`: worker, dispatcher, api, metrics and healthcheck;
- `render`: the live view of a running job; `common`: output, input files and the client every command uses.
"""

from __future__ import annotations

import os
import sys

from agentq.cli.common import fail
from agentq.cli.parser import build_parser
from agentq.errors import AgentQError, StoreUnavailableError

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    from agentq.settings import load_settings

    try:
        args.settings = load_settings()
        return args.handler(args) or 0
    except StoreUnavailableError as error:
        hint = "" if args.settings.redis_url_is_set else " (AGENTQ_REDIS_URL is not set)"
        return fail(f"{error}{hint}")
    except AgentQError as error:
        return fail(str(error))
    except BrokenPipeError:
        # the reader went away (`agentq events ... | head`): stop quietly, as other command-line tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except KeyboardInterrupt:
        return 130
