"""Protocol errors that say whose fault a bad frame is.

A detail may quote what a peer sent (a decoder's complaint about its bytes, a reason it
gave); `one_line` escapes what could break the line or drive a terminal, so that an error
stays one line however hostile the peer.
"""


def one_line(text: str) -> str:
    """`text` with every unprintable character (newlines, escapes, controls) escaped."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


class ProtocolError(Exception):
    """A frame or message that breaks the wire contract, attributed to a named peer."""

    def __init__(self, peer: str, detail: str) -> None:
        detail = one_line(detail)
        super().__init__(f"protocol error from {peer}: {detail}")
        self.peer = peer
        self.detail = detail


class RemoteProtocolError(ProtocolError):
    """The peer sent bytes that do not form a valid frame or message."""


class LocalProtocolError(ProtocolError):
    """We were asked to send something the protocol does not allow (a bug on our side)."""
