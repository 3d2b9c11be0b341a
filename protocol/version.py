"""Protocol version: bumped when a message changes meaning (a defaulted field appended does not)."""

PROTOCOL_VERSION = 2
