"""The HTTP API and web page (README.md#the-http-api-and-the-web-page): `create_api`, served by `agentq api`."""

from agentq.api.app import create_api
from agentq.api.auth import ApiAuth

__all__ = ["ApiAuth", "create_api"]
