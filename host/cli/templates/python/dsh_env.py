"""What a contributor's `resolve` gives, made into what the contract carries.

`dsh-env new --lang python` writes this file beside `app.py`; wrap
`resolve` with `checked`:

    from dsh_env import checked

    class WitWorld(wit_world.WitWorld):
        @checked
        def resolve(self, execution): ...

componentize-py lowers `resolve`'s result after it returns: a value that is
not a string fails the whole call with a message that names no key, and an
exception other than `Err` is a trap. `checked` names the key whose value is
wrong, and makes any exception the call's error, with its message.
"""

import functools

from componentize_py_types import Err


def checked(resolve):
    """`resolve`, with an exception made its error and its result checked."""

    @functools.wraps(resolve)
    def wrapper(self, execution):
        try:
            result = resolve(self, execution)
        except Err:
            raise
        except Exception as e:  # noqa: BLE001 - every failure becomes the call's error
            raise Err(f"{type(e).__name__}: {e}") from None
        return pairs(result)

    return wrapper


def pairs(result):
    """`result` if it is a list of (key, value) string pairs; else raises, naming what is wrong."""
    if not isinstance(result, list):
        raise Err(f"resolve returned {describe(result)}, not a list of (key, value) pairs")
    for i, pair in enumerate(result):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2 or not isinstance(pair[0], str):
            raise Err(f"resolve's pair {i} is {describe(pair)}, not a (key, value) pair of strings")
        if not isinstance(pair[1], str):
            raise Err(f"resolve's value for {pair[0]} is {describe(pair[1])}, not a string")
    return [tuple(pair) for pair in result]


def describe(value):
    """A short description of any value, which never raises."""
    if value is None:
        return "None"
    name = type(value).__name__
    article = "an" if name[:1].lower() in "aeiou" else "a"
    return f"{article} {name}"
