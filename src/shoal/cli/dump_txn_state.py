"""``shoal dump-log --transaction-log-decoder``: the transaction coordinator's state, one line per
transactional id, as Kafka's ``kafka-dump-log.sh --transaction-log-decoder`` prints the records of
``__transaction_state`` (Shoal keeps that compacted topic's latest values in the metadata store's
transaction table, so this reads the table: what a coordinator loads when it takes over)."""

from __future__ import annotations

from shoal.cli.diskless_metadata import ToolError
from shoal.config import Config
from shoal.store.factory import StoreNotFoundError, open_transaction_store
from shoal.store.transactions import StoredTransaction, transaction_partition


def transaction_line(txn: StoredTransaction, partitions: int) -> str:
    """Kafka's TransactionLogMessageParser shape: the key, then the value's fields."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in txn.partitions:
        by_topic.setdefault(topic, []).append(partition)
    listed = ",".join(f"{t}-{p}" for t, ps in by_topic.items() for p in ps)
    return (
        f"transaction_state_partition: {transaction_partition(txn.transactional_id, partitions)} "
        f"key: transaction_metadata::transactionalId={txn.transactional_id} "
        f"payload: producerId:{txn.producer_id},producerEpoch:{txn.producer_epoch},"
        f"prevProducerId:{txn.prev_producer_id},nextProducerId:{txn.next_producer_id},"
        f"lastProducerEpoch:{txn.last_producer_epoch},state={txn.state},partitions=[{listed}],"
        f"txnLastUpdateTimestamp={txn.txn_last_update_timestamp_ms},"
        f"txnStartTimestamp={txn.txn_start_timestamp_ms},txnTimeoutMs={txn.txn_timeout_ms},"
        f"clientTransactionVersion={txn.client_transaction_version}"
    )


def transaction_state_lines(config: Config) -> list[str]:
    try:
        store = open_transaction_store(config, must_exist=True)
    except StoreNotFoundError as exc:
        raise ToolError(str(exc)) from None
    try:
        records = store.load()
    finally:
        store.close()
    partitions = int(config["transaction.state.log.num.partitions"])
    return [transaction_line(t, partitions) for t in records]
