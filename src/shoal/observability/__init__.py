"""Observability: Prometheus metrics named after Kafka's MBeans (see ``metrics``)."""

from shoal.observability.metrics import BrokerMetrics, MetricsServer, start_metrics_server

__all__ = ["BrokerMetrics", "MetricsServer", "start_metrics_server"]
