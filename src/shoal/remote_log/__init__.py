"""Kafka's RemoteLogManager (KIP-405) for classic topics with ``remote.storage.enable``: the
partition leader copies rolled segments to remote storage through the RemoteStorageManager and
records them in the RemoteLogMetadataManager, applies the topic's total retention to remote
segments, and every replica serves reads below its local log start from remote segments.

It sits above the storage kinds: it reads classic logs and uses ``shoal.tiered``'s interfaces."""
