"""qosmos: QoS-aware, prediction-driven scheduling for multi-tenant GPU clusters."""

__version__ = "0.1.0"
