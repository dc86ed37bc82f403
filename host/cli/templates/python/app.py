"""`{{name}}`: a dsh-env contributor.

`declare` names every key it may set; `resolve` returns their values for one
tool call, in a fresh sandboxed instance each time.
"""

import wit_world
from dsh_env import checked
from wit_world.imports.types import Declaration, Execution, KeyDeclaration

KEY = "{{key}}"


class WitWorld(wit_world.WitWorld):
    def declare(self) -> Declaration:
        return Declaration(
            name="{{name}}",
            keys=[KeyDeclaration(key=KEY, description="The tool this call runs, e.g. bash.")],
        )

    # `checked` (dsh_env.py) names the key of a value that is not a string,
    # and makes any exception the call's error, with its message.
    @checked
    def resolve(self, execution: Execution) -> list[tuple[str, str]]:
        # A key left out is absent; `raise componentize_py_types.Err("why")`,
        # or any exception, fails the call with that message.
        return [(KEY, execution.tool)]
