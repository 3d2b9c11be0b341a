"""Protocol version: bumped whenever a message changes meaning (appending a defaulted field does not)."""

PROTOCOL_VERSION = 1
