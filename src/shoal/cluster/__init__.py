"""Cluster membership: broker registration and heartbeats, fencing, the controller lease, and
where each thing lives on the brokers that are alive (placement)."""
