"""The HTTP API and web page (SPEC §14): `create_api`, served by `agentq api`."""

from agentq.api.app import create_api
from agentq.api.auth import ApiAuth

__all__ = ["ApiAuth", "create_api"]
