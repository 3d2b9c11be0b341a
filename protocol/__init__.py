"""The aner wire: message types, length-prefixed framing, connection rules, version and
source fingerprint.

Sans-IO by design: nothing here touches sockets, processes, files or event loops, so every
byte of the protocol can be tested without starting anything.

- `messages`: the wire messages, one tagged union; `framing`: 4-byte length-prefixed frames
  with a hard maximum;
- `connection`: the rules of each side (`CoordinatorConnection`, `WorkerConnection`);
  `events`: what they make of the bytes received; `staging`: the staging rules both share;
- `errors`: whose fault a protocol error is; `version`: the protocol version;
  `fingerprint`: the source-contract rule.
"""

from protocol.connection import (
    HOST_HEX_DIGITS,
    MAX_ITEMS,
    MAX_MACHINE_FIELDS,
    MAX_MACHINE_KEY_CHARS,
    MAX_MACHINE_VALUE_CHARS,
    MAX_QUEUED_PER_SLOT,
    MAX_REASON_CHARS,
    MAX_SECONDS,
    CoordinatorConnection,
    Phase,
    WorkerConnection,
    bounded_machine,
)
from protocol.errors import LocalProtocolError, ProtocolError, RemoteProtocolError
from protocol.events import (
    Accepted,
    Answered,
    BlockReceived,
    BlocksWanted,
    Computing,
    CoordinatorEvent,
    DataStaged,
    HelloReceived,
    ParamsReceived,
    PingReceived,
    Ponged,
    Rejected,
    ShutdownReceived,
    StageReceived,
    TaskReceived,
    WorkerEvent,
)
from protocol.fingerprint import CONTRACT_PACKAGES, contract_files, fingerprint_sources
from protocol.framing import MAX_FRAME_BYTES, FrameDecoder, FrameEncoder
from protocol.messages import (
    Block,
    Hello,
    Message,
    Missing,
    Params,
    Ping,
    PluginIdentity,
    Pong,
    Refused,
    Result,
    Shutdown,
    Stage,
    Staged,
    Task,
    TaskFailed,
    Welcome,
    Working,
)
from protocol.staging import MAX_STAGE_BLOCKS, sha256_hex
from protocol.version import PROTOCOL_VERSION

__all__ = [
    "CONTRACT_PACKAGES",
    "HOST_HEX_DIGITS",
    "MAX_FRAME_BYTES",
    "MAX_ITEMS",
    "MAX_MACHINE_FIELDS",
    "MAX_MACHINE_KEY_CHARS",
    "MAX_MACHINE_VALUE_CHARS",
    "MAX_QUEUED_PER_SLOT",
    "MAX_REASON_CHARS",
    "MAX_SECONDS",
    "MAX_STAGE_BLOCKS",
    "PROTOCOL_VERSION",
    "Accepted",
    "Answered",
    "Block",
    "BlockReceived",
    "BlocksWanted",
    "Computing",
    "CoordinatorConnection",
    "CoordinatorEvent",
    "DataStaged",
    "FrameDecoder",
    "FrameEncoder",
    "Hello",
    "HelloReceived",
    "LocalProtocolError",
    "Message",
    "Missing",
    "Params",
    "ParamsReceived",
    "Phase",
    "Ping",
    "PingReceived",
    "PluginIdentity",
    "Pong",
    "Ponged",
    "ProtocolError",
    "Refused",
    "Rejected",
    "RemoteProtocolError",
    "Result",
    "Shutdown",
    "ShutdownReceived",
    "Stage",
    "StageReceived",
    "Staged",
    "Task",
    "TaskFailed",
    "TaskReceived",
    "Welcome",
    "WorkerConnection",
    "WorkerEvent",
    "Working",
    "bounded_machine",
    "contract_files",
    "fingerprint_sources",
    "sha256_hex",
]
