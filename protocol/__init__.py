"""The aner wire: message types, length-prefixed framing, version and source fingerprint.

Sans-IO by design: nothing here touches sockets, processes, files or event loops, so every
byte of the protocol can be tested without starting anything.
"""

from protocol.errors import LocalProtocolError, ProtocolError, RemoteProtocolError
from protocol.fingerprint import CONTRACT_FILES, fingerprint_sources
from protocol.framing import MAX_FRAME_BYTES, FrameDecoder, FrameEncoder
from protocol.messages import (
    FxResult,
    FxTask,
    Hello,
    McResult,
    McTask,
    Message,
    Refused,
    Shutdown,
    TaskFailed,
    Welcome,
)
from protocol.version import PROTOCOL_VERSION

__all__ = [
    "CONTRACT_FILES",
    "MAX_FRAME_BYTES",
    "PROTOCOL_VERSION",
    "FrameDecoder",
    "FrameEncoder",
    "FxResult",
    "FxTask",
    "Hello",
    "LocalProtocolError",
    "McResult",
    "McTask",
    "Message",
    "ProtocolError",
    "Refused",
    "RemoteProtocolError",
    "Shutdown",
    "TaskFailed",
    "Welcome",
    "fingerprint_sources",
]
