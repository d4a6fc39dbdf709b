"""Diskless replicas as caches (KIP-1163 "Replicas" and "Consume path").

A broker holding a replica of a diskless partition keeps a local *cache log* of it, in Kafka's
segment format, filled from object storage by following the Batch Coordinator's log tail, never
by inter-broker replication. Consumers are served from it when it covers their offset and is in
sync with the coordinator; otherwise the diskless kind reads object storage directly. The
partition's leader tracks which replicas are in sync from the (empty) Fetches they send it.

This package sits above the storage kinds: the cache log is classic's ``PartitionLog``, the
filling is diskless's reader.
"""
