"""`session-url`: a link to the agent's session in a web UI.

`DSH_SESSION_URL` is the configured `base_url`, without its trailing slash,
then `/` and the agent's session id. It is absent for a call without an agent
and when no `base_url` is configured.

Configure it in the contributor's manifest entry, e.g.
`base_url = "https://agents.example.com/sessions/"`.
"""

import wit_world
from wit_world.imports import config
from wit_world.imports.types import Declaration, Execution, KeyDeclaration

KEY = "DSH_SESSION_URL"


class WitWorld(wit_world.WitWorld):
    def declare(self) -> Declaration:
        return Declaration(
            name="session-url",
            keys=[
                KeyDeclaration(
                    key=KEY,
                    description="Web URL of the agent's session: the configured base_url, then the session id.",
                )
            ],
        )

    def resolve(self, execution: Execution) -> list[tuple[str, str]]:
        base_url = config.get("base_url")
        if execution.agent is None or not base_url:
            return []
        return [(KEY, base_url.rstrip("/") + "/" + execution.agent.session_id)]
