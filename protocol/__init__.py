"""The aner wire: message types, length-prefixed framing, connection rules, version and
source fingerprint.

Sans-IO by design: nothing here touches sockets, processes, files or event loops, so every
byte of the protocol can be tested without starting anything.
"""

from protocol.connection import (
    MAX_ITEMS,
    MAX_QUEUED_PER_SLOT,
    Accepted,
    Answered,
    CoordinatorConnection,
    CoordinatorEvent,
    HelloReceived,
    ParamsReceived,
    Phase,
    PingReceived,
    Ponged,
    Rejected,
    ShutdownReceived,
    TaskReceived,
    WorkerConnection,
    WorkerEvent,
)
from protocol.errors import LocalProtocolError, ProtocolError, RemoteProtocolError
from protocol.fingerprint import CONTRACT_FILES, fingerprint_sources
from protocol.framing import MAX_FRAME_BYTES, FrameDecoder, FrameEncoder
from protocol.messages import (
    Hello,
    Message,
    Params,
    Ping,
    Pong,
    Refused,
    Result,
    Shutdown,
    Task,
    TaskFailed,
    Welcome,
)
from protocol.version import PROTOCOL_VERSION

__all__ = [
    "CONTRACT_FILES",
    "MAX_FRAME_BYTES",
    "MAX_ITEMS",
    "MAX_QUEUED_PER_SLOT",
    "PROTOCOL_VERSION",
    "Accepted",
    "Answered",
    "CoordinatorConnection",
    "CoordinatorEvent",
    "FrameDecoder",
    "FrameEncoder",
    "Hello",
    "HelloReceived",
    "LocalProtocolError",
    "Message",
    "Params",
    "ParamsReceived",
    "Phase",
    "Ping",
    "PingReceived",
    "Pong",
    "Ponged",
    "ProtocolError",
    "Refused",
    "Rejected",
    "RemoteProtocolError",
    "Result",
    "Shutdown",
    "ShutdownReceived",
    "Task",
    "TaskFailed",
    "TaskReceived",
    "Welcome",
    "WorkerConnection",
    "WorkerEvent",
    "fingerprint_sources",
]
