"""Protocol errors that say whose fault a bad frame is."""


class ProtocolError(Exception):
    """A frame or message that breaks the wire contract, attributed to a named peer."""

    def __init__(self, peer: str, detail: str) -> None:
        super().__init__(f"protocol error from {peer}: {detail}")
        self.peer = peer
        self.detail = detail


class RemoteProtocolError(ProtocolError):
    """The peer sent bytes that do not form a valid frame or message."""


class LocalProtocolError(ProtocolError):
    """We were asked to send something the protocol does not allow (a bug on our side)."""
