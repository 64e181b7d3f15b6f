-- mysqlq schema, version 6: a lock row per ordering key.
--
-- `mysqlq_ordering`: the claim locks an ordering key's row here before it decides, with a
-- fresh read, whether its candidate is the key's head (the lowest pending id) and no job of the
-- key is running. The claim's SELECT filters ordering keys too, but its subquery is a
-- consistent read whose snapshot can miss rows that its locking scan sees (rows committed while
-- the statement runs), and two claimers can each judge a different job of one key the head:
-- without this row two jobs of one key could run at once. The lock is taken without waiting
-- (`FOR UPDATE SKIP LOCKED`): a key another claim is deciding right now is left for the next
-- round. One row per key ever used; the rows hold no state, so deleting them is always safe.

CREATE TABLE IF NOT EXISTS mysqlq_ordering (
  ordering_key VARCHAR(191) CHARACTER SET utf8mb4 COLLATE {key_collation} NOT NULL,
  PRIMARY KEY (ordering_key)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
