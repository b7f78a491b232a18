"""qosmos component."""
